#!/bin/sh
# The migrate_device_range() anon_vma reproducer (scripts/upstream-repro.sh)
# against test_hmm.ko: in-tree parts only.
[ -f /msvm/test_hmm.ko ] || { echo "test_hmm.ko missing"; exit 1; }
insmod /msvm/test_hmm.ko || exit 1
migrate_device_anon_vma_repro "${msvm_repro_secs:-20}"
