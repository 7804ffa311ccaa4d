#!/bin/sh
# The README's "make run": load msvm and show the devices it drives.
. /msvm/guest/lib.sh
# Keep the console to warnings: the probe log is shown below, and the KUnit
# report that runs at load belongs to "make test".
dmesg -n 4
load_msvm || exit 1
echo
echo "== msvm probe log"
dmesg | grep -E 'msvm [0-9a-f]{4}:' | sed 's/^\[[ 0-9.]*\] //'
echo
echo "== msvm info"
msvm info
echo
echo "== /sys/kernel/debug/msvm/topology"
cat /sys/kernel/debug/msvm/topology
echo
echo "== msvm demo"
msvm demo
echo
echo "== msvm stats"
msvm stats
