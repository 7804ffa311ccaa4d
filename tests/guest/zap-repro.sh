#!/bin/sh
# The zap_huge_pmd() reproducer (scripts/upstream-repro.sh) against
# test_hmm.ko: in-tree parts only.
[ -f /msvm/test_hmm.ko ] || { echo "test_hmm.ko missing"; exit 1; }
insmod /msvm/test_hmm.ko || exit 1
echo always >/sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
zap_huge_pmd_repro "${msvm_repro_secs:-20}"
