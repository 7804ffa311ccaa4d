#!/bin/sh
# The 8-GPU server (scripts/vm.py --gpus 8gpu): two NUMA nodes, each with
# its own PCIe host bridge, a switch of three GPUs and one GPU on its own
# root port. QUERY's P2P matrix against sysfs, the owner groups, jobs on
# both sides of the bridges, and a GPU of node 1 hot-unplugged and plugged
# back (the harness answers the requests on the console).
. /msvm/guest/lib.sh
rc=0
kmemleak_start
echo "== msvm: insmod"
load_msvm || exit 1
# KUnit's msvm_numa ran at the load, here on two nodes: a page for each.
echo "== KUnit msvm_numa on two nodes"
dmesg | grep -E "ok [0-9]+ (pages_without_a_vma|msvm_numa)" || rc=1
dmesg | grep -qE "[^t] ok [0-9]+ msvm_numa$" || { echo "msvm_numa: not ok or not run"; rc=1; }
echo "== msvm-tests topology8"
msvm-tests topology8 || rc=1
unload_msvm || rc=1
kmemleak_check || rc=1
exit $rc
