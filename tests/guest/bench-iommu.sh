#!/bin/sh
# The README's "make bench", guest side of its IOMMU boot (a strict
# virtual IOMMU, a CPU whose host bridges pass P2P): a job reading a peer
# through the host bridge against one reading a peer inside the switch;
# migrations with the GPU's IOMMU group strict, lazy and in passthrough;
# the replayable fault's round trip behind the strict IOMMU.
. /msvm/guest/lib.sh
dmesg -n 4
rc=0
echo 0 >/proc/sys/vm/compaction_proactiveness
echo never >/sys/kernel/mm/transparent_hugepage/enabled
load_msvm || exit 1
echo "== P2P paths and IOMMU modes, 64 MiB"
msvm-tests bench-iommu 64 || rc=1
echo "== replayable faults behind the strict IOMMU"
msvm-tests bench-faults iommu_strict_latency_fault || rc=1
unload_msvm >/dev/null || rc=1
exit $rc
