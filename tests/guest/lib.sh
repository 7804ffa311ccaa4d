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

# kmemleak_start: forgets the leaks reported so far (on a kernel with
# kmemleak; elsewhere nothing).
kmemleak_start() {
	[ -e /sys/kernel/debug/kmemleak ] && echo clear >/sys/kernel/debug/kmemleak
	return 0
}

# kmemleak_check: on a kernel with kmemleak, scans, prints the report and
# fails if there is a new leak (objects must stay unreferenced across two
# scans to be reported).
kmemleak_check() {
	kml=/sys/kernel/debug/kmemleak
	[ -e $kml ] || return 0
	echo "== kmemleak"
	echo scan >$kml
	sleep 1
	echo scan >$kml
	leaks=$(grep -c '^unreferenced object' $kml)
	cat $kml
	echo "kmemleak: $leaks new leak(s)"
	[ "$leaks" = 0 ]
}

# unload_msvm: rmmod msvm, saying whether it worked.
unload_msvm() {
	if rmmod msvm; then
		echo "rmmod: ok"
	else
		echo "rmmod: FAILED"
		return 1
	fi
}
