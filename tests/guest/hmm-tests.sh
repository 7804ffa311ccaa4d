#!/bin/sh
# The kernel's own device-private test suite (tools/testing/selftests/mm/
# hmm-tests.c), unchanged, against test_hmm.ko and then against
# msvm_dmirror.ko (lib/test_hmm.c in Rust, on msvm's glue): each run
# between "hmm-tests: module NAME" and "hmm-tests: end NAME" lines, which
# scripts/hmm-tests.sh sets side by side. msvm_hmm_modules= names the
# modules, comma-separated (default test_hmm,msvm_dmirror), msvm_hmm_filter= the cases (hmm-tests -r).
[ -x /msvm/bin/hmm-tests ] || { echo "hmm-tests missing"; exit 1; }
echo always >/sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
rc=0
for m in $(echo "${msvm_hmm_modules:-test_hmm,msvm_dmirror}" | tr , " "); do
	[ -f /msvm/$m.ko ] || { echo "$m.ko missing"; rc=1; continue; }
	insmod /msvm/$m.ko || { rc=1; continue; }
	echo "hmm-tests: module $m"
	hmm-tests ${msvm_hmm_filter:+-r "$msvm_hmm_filter"} || rc=1
	echo "hmm-tests: end $m"
	rmmod $m || rc=1
done
exit $rc
