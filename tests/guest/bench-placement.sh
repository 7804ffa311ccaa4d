#!/bin/sh
# The README's "make bench", guest side of its placement boot (256 MiB
# GPUs): the automatic-placement workloads with each policy, msvm reloaded
# with the module parameter that selects it.
. /msvm/guest/lib.sh
dmesg -n 4
rc=0
for mode in off:0 lru:1 on:2; do
	name=${mode%%:*}
	echo "== oversubscription, evict=${mode#*:} ($name)"
	load_msvm evict="${mode#*:}" || exit 1
	msvm-tests bench-oversub "$name" || rc=1
	unload_msvm >/dev/null || rc=1
done
exit $rc
