#!/bin/sh
# The README's "make bench", guest side of its placement boot (256 MiB
# GPUs): the automatic-placement workloads with each policy, msvm reloaded
# with the module parameters that select it.
. /msvm/guest/lib.sh
dmesg -n 4
rc=0
# The eviction policies alone: thrashing detection off, or it would pin
# the streamed data in system RAM after two rounds.
for mode in off:0 lru:1 on:2; do
	name=${mode%%:*}
	echo "== oversubscription, evict=${mode#*:} ($name), thrash=0"
	load_msvm evict="${mode#*:}" thrash=0 || exit 1
	msvm-tests bench-oversub "$name" || rc=1
	unload_msvm >/dev/null || rc=1
done
for mode in off:0 on:1; do
	name=${mode%%:*}
	echo "== ping-pong and stream, thrash=${mode#*:} ($name)"
	load_msvm thrash="${mode#*:}" || exit 1
	msvm-tests bench-pingpong "$name" || rc=1
	msvm-tests bench-stream "$name" || rc=1
	unload_msvm >/dev/null || rc=1
done
for mode in off:0 on:1; do
	name=${mode%%:*}
	echo "== hot remote buffer, access_counters=${mode#*:} ($name)"
	load_msvm access_counters="${mode#*:}" || exit 1
	msvm-tests bench-hot-remote "$name" || rc=1
	unload_msvm >/dev/null || rc=1
done
# Two tenants on one full device, each in a dmem cgroup: without and with
# dmem.low (112 MiB of the 256 MiB device each); thrash=0, as above.
for mode in off:0 on:112M; do
	name=${mode%%:*}
	echo "== two tenants, dmem.low ${mode#*:} ($name), thrash=0"
	load_msvm thrash=0 || exit 1
	for t in msvm_ta msvm_tb; do
		cg_new $t || rc=1
		for r in $(awk '$1 ~ /^drm\// { print $1 }' $CG/dmem.capacity); do
			echo "$r ${mode#*:}" >$CG/$t/dmem.low || rc=1
		done
	done
	msvm-tests bench-tenants "$name" || rc=1
	unload_msvm >/dev/null || rc=1
	cg_gone msvm_ta || rc=1
	cg_gone msvm_tb || rc=1
done
echo "== read-shared weights: read-mostly, migrate-on-access, default"
load_msvm || exit 1
msvm-tests bench-read-shared || rc=1
unload_msvm >/dev/null || rc=1
exit $rc
