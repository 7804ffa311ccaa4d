#!/bin/sh
# The data-integrity tests, P2P jobs and copies, and the fault buffer, in a
# guest whose devices sit behind a virtual IOMMU (scripts/vm.py --iommu
# intel): every DMA and P2P address msvm gives a device is an IOVA, which
# QEMU sends the device as a DMA_MAP; the mode is the command line's
# (iommu.strict=1: every unmap invalidates at once; iommu=pt: identity;
# iommu.strict=0: lazy, unmaps batched in a flush queue and invalidated
# later). Checks first that the IOMMU translates (or passes through) as
# asked.
. /msvm/guest/lib.sh
rc=0
case " $(cat /proc/cmdline) " in
*" iommu=pt "*) want=identity ;;
*" iommu.strict=1 "*) want=DMA ;;
*" iommu.strict=0 "*) want=DMA-FQ ;;
*) echo "iommu: booted with none of iommu.strict=1, iommu.strict=0, iommu=pt"; exit 1 ;;
esac
# The GPUs' groups (msvm-gpu's class: 3D display controller).
groups=""
for d in /sys/bus/pci/devices/*; do
	[ "$(cat "$d/class")" = 0x030200 ] || continue
	[ -e "$d/iommu_group" ] || { echo "iommu: $d has no IOMMU group"; exit 1; }
	groups="$groups $d/iommu_group"
done
# Lazy: intel-iommu with caching mode (which QEMU's vfio-user client needs)
# makes Linux choose strict ("IOMMU batching disallowed due to
# virtualization"); a DMA group takes a flush queue at run time
# (iommu_group_store_type(): DMA to DMA-FQ), which is lazy invalidation.
if [ "$want" = DMA-FQ ]; then
	for g in $groups; do
		[ "$(cat "$g/type")" = DMA ] || continue
		echo DMA-FQ >"$g/type" || { echo "iommu: $g refused DMA-FQ"; exit 1; }
	done
fi
types=""
for g in $groups; do
	types="$types $(cat "$g/type")"
done
[ -n "$types" ] || { echo "iommu: no GPU found"; exit 1; }
for t in $types; do
	if [ "$t" != "$want" ]; then
		echo "iommu: a GPU's domain is $t, want $want (types:$types)"
		exit 1
	fi
done
echo "iommu: every GPU's domain is $want"
echo "== msvm: insmod large_folios=1 (the 2 MiB paths copy too)"
load_msvm large_folios=1 || exit 1
echo "== msvm-tests iommu ($want)"
msvm-tests iommu || rc=1
rmmod msvm || rc=1
exit $rc
