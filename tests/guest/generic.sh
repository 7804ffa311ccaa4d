#!/bin/sh
# Generic devices (Documentation/hardware.rst): msvm binds, at run time, a
# device kind it has no id-table entry for. The guest has two ivshmem GPUs
# (one behind the switch, one on its own root port) and three QEMU NVMe
# controllers, for which it has no driver: one with a 64 MiB controller
# memory buffer (prefetchable BAR2) behind the switch, bound and used as a
# GPU; one with a 16 MiB buffer (less than a chunk) and one with none (no
# prefetchable BAR), both refused with a log line.
#  1. insmod msvm generic_id=0x1b360010 large_folios=1: the core tests run with the NVMe
#     device as gpu0 and as the P2P pair's second device.
#  2. insmod msvm, then driver_override and drivers_probe on each NVMe
#     controller: bound or refused the same way.
#  3. The sysfs new_id file: Linux 7.3 refuses it for a Rust driver
#     (EINVAL: the driver data must be an id-table entry's, a pointer).
. /msvm/guest/lib.sh
rc=0
NVME="1b36 0010"
nvme_devices() {
	for d in /sys/bus/pci/devices/*; do
		[ "$(cat "$d/vendor") $(cat "$d/device")" = "0x1b36 0x0010" ] && basename "$d"
	done
}

echo "== msvm: insmod generic_id=0x1b360010 large_folios=1"
kmemleak_start
load_msvm generic_id=0x1b360010 large_folios=1 || exit 1
dmesg | grep 'generic device'
msvm info || rc=1
echo "== msvm-tests generic"
msvm-tests generic || rc=1
unload_msvm || rc=1

echo "== msvm: insmod, then driver_override"
dmesg -c >/dev/null
load_msvm || exit 1
for d in $(nvme_devices); do
	echo msvm >"/sys/bus/pci/devices/$d/driver_override"
	echo "$d" >/sys/bus/pci/drivers_probe 2>/dev/null
	echo "driver_override $d: $(basename "$(readlink "/sys/bus/pci/devices/$d/driver" 2>/dev/null)" 2>/dev/null)"
done
want=$(ls -d /sys/bus/pci/drivers/msvm/0000:* 2>/dev/null | wc -l)
i=0
while [ "$(ls /sys/bus/pci/drivers/msvm/*/drm 2>/dev/null | grep -c renderD)" -lt "$want" ]; do
	i=$((i + 1))
	[ $i -gt 50 ] && { echo "msvm: render nodes did not appear"; rc=1; break; }
	sleep 0.1
done
echo "== msvm-tests generic-bind (driver_override)"
msvm-tests generic-bind || rc=1
unload_msvm || rc=1
for d in $(nvme_devices); do
	echo >"/sys/bus/pci/devices/$d/driver_override"
done

echo "== msvm: insmod with a bad generic_id (must fail: EEXIST for an id of the table, EINVAL for vendor 0 or ffff)"
for bad in 0x1af41110 0x00001234 0xffff0010; do
	if insmod /msvm/msvm.ko generic_id=$bad 2>/dev/null; then
		echo "generic_id=$bad: loaded"
		rmmod msvm
		rc=1
	else
		echo "generic_id=$bad: refused"
	fi
done

echo "== msvm: new_id"
load_msvm || exit 1
if echo "$NVME" >/sys/bus/pci/drivers/msvm/new_id 2>/dev/null; then
	echo "new_id: accepted (this kernel takes new_id for Rust drivers: see hardware.rst)"
else
	echo "new_id: refused, as Linux 7.3 does for a Rust driver (use generic_id= or driver_override)"
fi
unload_msvm || rc=1
# Every device msvm probed is disabled again (enable count zero, bus
# mastering off), bound or refused.
for d in /sys/bus/pci/devices/*; do
	case "$(cat "$d/vendor"):$(cat "$d/device")" in
	0x1b36:0x0010 | 0x1af4:0x1110) ;;
	*) continue ;;
	esac
	if [ "$(cat "$d/enable")" != 0 ]; then
		echo "$(basename "$d"): still enabled after rmmod"
		rc=1
	fi
done
kmemleak_check || rc=1
exit $rc
