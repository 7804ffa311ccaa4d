# Helpers for the guest commands. Sourced.

# load_msvm [PARAM=VALUE...]: inserts msvm.ko and waits for its render nodes.
load_msvm() {
	insmod /msvm/msvm.ko "$@" || return 1
	want=$(ls -d /sys/bus/pci/drivers/msvm/0000:* 2>/dev/null | wc -l)
	i=0
	while [ "$(ls /sys/bus/pci/drivers/msvm/*/drm 2>/dev/null | grep -c renderD)" -lt "$want" ]; do
		i=$((i + 1))
		[ $i -gt 50 ] && { echo "msvm: render nodes did not appear"; return 1; }
		sleep 0.1
	done
}
