#!/bin/sh
# `make soak`'s guest: the mixed run (msvm-tests soak: stress workers on THP
# and 4 KiB regions with zaps, munmaps, fork/exit children; a GPU unbound
# and bound again, then hot-unplugged and re-plugged, over and over; memory
# pressure), then rmmod and, on a kernel with kmemleak, a leak scan.
. /msvm/guest/lib.sh
rc=0
kmemleak_start
echo "== msvm: insmod"
load_msvm || exit 1
secs=${msvm_soak_secs:-600}
echo "== msvm-tests soak ($secs s)"
# Straight to the console: the host reads its unplug requests there.
{ msvm-tests soak "$secs" 2>&1; echo $? >/tmp/soak.rc; } | tee /tmp/soak.log
[ "$(cat /tmp/soak.rc)" = 0 ] || rc=1
awk '/^# stress-proc/ { o += $3; b += $4; u += $5 }
	/^# soak-pressure [0-9]/ { r = $3; if ($4 > p) p = $4 }
	/^# soak: .* sysfs unbinds/ { line = $0 }
	END { printf "soak: %d operations, %d MiB verified, %d operations met a GPU that went; %d pressure rounds (peak %d MiB)\n", o, b / 1048576, u, r, p
		sub(/^# soak: /, "soak: ", line); print line }' /tmp/soak.log
unload_msvm || rc=1
kmemleak_check || rc=1
exit $rc
