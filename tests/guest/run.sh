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
echo
echo "== /sys/kernel/debug/msvm/copy_engine (the demo's migrations, by each msvm-gpu's copy engine)"
cat /sys/kernel/debug/msvm/copy_engine
echo "== /sys/kernel/debug/msvm/job_engine (the demo's jobs, by each msvm-gpu's job engine and MMU)"
cat /sys/kernel/debug/msvm/job_engine
echo
echo "== memory pressure: a process takes RAM until the kernel reclaims"
echo "(the shrinker removes the pagemaps of idle chunks: 'chunks' below)"
avail=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
msvm-tests hog $((avail + 48)) | sed 's/^/   /'
msvm stats
echo
echo "== hot-unplug of gpu0 while a process keeps 1 MiB of data on it"
rm -f /tmp/ready /tmp/go
msvm-tests hold /tmp/ready /tmp/go | sed 's/^/   /' &
i=0
while [ ! -e /tmp/ready ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
gpu0=$(ls -d /sys/bus/pci/drivers/msvm/0000:* | head -1)
i=0
while [ -e "$gpu0" ] && [ $i -lt 400 ]; do
	# Asked again every 10 s: kernel messages can cut a console line.
	[ $((i % 100)) -eq 0 ] && echo "MSVM-HOST: device_del gpu0"
	sleep 0.1
	i=$((i + 1))
done
echo "   gpu0 ($(basename "$gpu0")) is gone after $((i / 10)) s; the process reads its data:"
touch /tmp/go
wait
msvm info | head -4
sleep 3 # the host sees the slot power off (QMP DEVICE_DELETED)
