#!/bin/sh
# The README's "make bench", guest side: msvm and the kernel's test_hmm
# moving the same sizes the same ways, in one boot, THP on and off; then
# msvm again with 2 MiB device folios on (large_folios=1, THP on).
. /msvm/guest/lib.sh
dmesg -n 4
insmod /msvm/test_hmm.ko || exit 1
load_msvm || exit 1
thp=/sys/kernel/mm/transparent_hugepage/enabled
# No background compaction competing with the timed moves for the 2 vCPUs
# (both drivers allocate 2 MiB folios; kcompactd would run between them).
echo 0 >/proc/sys/vm/compaction_proactiveness
echo 0 >/sys/kernel/mm/transparent_hugepage/khugepaged/defrag
rc=0
for size in 64 256 1024; do
	for mode in always never; do
		echo $mode >$thp
		tag=
		[ $mode = never ] && tag=_4k
		echo "== $size MiB, THP $mode"
		hmm-bench $size "$tag" || rc=1
		msvm-tests bench $size "$tag" || rc=1
	done
done
echo always >$thp
# What the default (no 2 MiB device folios) costs: the THP moves again,
# with msvm moving them whole.
echo "== 2 MiB device folios (msvm large_folios=1), THP always"
if rmmod msvm && load_msvm large_folios=1; then
	for size in 64 256 1024; do
		echo "== $size MiB, THP always, large_folios=1"
		msvm-tests bench $size _2m || rc=1
	done
	# Latencies of 2 MiB folios among them (move_2m, cpu_fault_2m).
	echo "== latency (large_folios=1)"
	msvm-tests bench-latency || rc=1
	# Device page tables: warm jobs, fault latencies (move_2m a folio),
	# first touch, invalidation.
	echo "== device page tables (large_folios=1)"
	msvm-tests bench-devpt || rc=1
	rmmod msvm && load_msvm || exit 1
else
	rc=1
	load_msvm || exit 1
fi
echo "== multi-device, 64 MiB"
msvm-tests bench-p2p 64 || rc=1
echo "== independent work on independent devices"
msvm-tests bench-scale || rc=1
echo "== Level Zero overhead (libze_msvm.so.1 through the loader, no validation layer)"
if [ -x /msvm/ze/ze-tests ]; then
	LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu ZE_ENABLE_ALT_DRIVERS=/msvm/ze/libze_msvm.so.1 \
		/msvm/ze/ze-tests bench || rc=1
else
	echo "Level Zero: not in the initramfs"
	rc=1
fi
echo "== pagemap lifecycle"
msvm-tests bench-lifecycle || rc=1
for mib in 16 256; do
	echo "== pagemap create and teardown, $mib MiB chunks"
	rmmod msvm && load_msvm chunk_mib=$mib || rc=1
	msvm-tests bench-lifecycle quick || rc=1
done
exit $rc
