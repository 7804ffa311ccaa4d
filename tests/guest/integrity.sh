#!/bin/sh
# The data-integrity tests in a guest booted with bounce buffers
# (swiotlb=force,track_hiwater on the kernel command line, as SEV/TDX
# guests have them): every copy and engine write that goes through a DMA
# mapping must survive the bounce buffer. The swiotlb high watermark proves
# the mappings bounced.
. /msvm/guest/lib.sh
rc=0
hw=/sys/kernel/debug/swiotlb/io_tlb_used_hiwater
grep -q 'swiotlb=force' /proc/cmdline || { echo "integrity: not booted with swiotlb=force"; exit 1; }
echo "== msvm: insmod large_folios=1 (the 2 MiB paths copy too)"
load_msvm large_folios=1 || exit 1
echo "== msvm-tests integrity (swiotlb=force)"
msvm-tests integrity || rc=1
used=$(cat $hw 2>/dev/null || echo 0)
echo "swiotlb: high watermark $used slot(s)"
if [ "$used" -gt 0 ]; then
	echo "msvm-tests: 1 passed, 0 failed (mappings went through bounce buffers)"
else
	echo "msvm-tests: 0 passed, 1 failed (no mapping went through a bounce buffer)"
	rc=1
fi
rmmod msvm || rc=1
exit $rc
