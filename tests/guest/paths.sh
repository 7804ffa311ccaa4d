#!/bin/sh
# P2P paths as pci_p2pdma decides them, in a guest whose CPU Linux takes
# for an AMD Zen one (scripts/vm.py --cpu zen: its host bridges pass P2P)
# and whose devices sit behind a virtual IOMMU in strict mode: the GPUs
# behind the switch reach each other inside it, at bus addresses the
# switch routes (no IOMMU mapping), and the GPU on its own root port is
# reached through the host bridge, its BAR mapped through the IOMMU
# (dma_map_resource). Jobs and migrations along each path, data checked;
# each job's bytes counted by the reading device on the path taken.
. /msvm/guest/lib.sh
rc=0
vendor=$(sed -n 's/^vendor_id[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
family=$(sed -n 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
if [ "$vendor" != AuthenticAMD ] || [ "$family" -lt 23 ]; then
	echo "paths: the CPU is $vendor family $family, want AuthenticAMD family 23 or later"
	exit 1
fi
echo "paths: CPU $vendor family $family"
echo "== msvm: insmod"
load_msvm || exit 1
cat /sys/kernel/debug/msvm/topology
msvm info || rc=1
echo "== msvm-tests paths"
msvm-tests paths || rc=1
cat /sys/kernel/debug/msvm/dma_paths
rmmod msvm || rc=1
exit $rc
