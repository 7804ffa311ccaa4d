#!/bin/sh
# The kernel's own device-private test suite (tools/testing/selftests/mm/
# hmm-tests.c) against test_hmm.ko: proves the harness on a suite nobody here
# wrote, and is the reference later msvm tests compare against.
[ -f /msvm/test_hmm.ko ] || { echo "test_hmm.ko missing"; exit 1; }
[ -x /msvm/bin/hmm-tests ] || { echo "hmm-tests missing"; exit 1; }
insmod /msvm/test_hmm.ko || exit 1
echo always >/sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
hmm-tests ${msvm_hmm_filter:+-r "$msvm_hmm_filter"}
rc=$?
rmmod test_hmm
exit $rc
