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

# The dmem cgroup controller (VRAM limits per cgroup; cgroup2 is mounted on
# /sys/fs/cgroup by /init).
CG=/sys/fs/cgroup

# cg_new NAME [MAX]: a cgroup under the root with the dmem controller, and
# dmem.max MAX (bytes, K/M/G suffixes) on every msvm device's region.
cg_new() {
	grep -qw dmem $CG/cgroup.subtree_control || echo +dmem >$CG/cgroup.subtree_control
	mkdir $CG/"$1" || return 1
	[ -z "${2:-}" ] && return 0
	for r in $(awk '$1 ~ /^drm\// { print $1 }' $CG/dmem.capacity); do
		echo "$r $2" >$CG/"$1"/dmem.max || return 1
	done
}

# cg_run NAME CMD...: runs CMD in cgroup NAME.
cg_run() {
	cg_name=$1
	shift
	sh -c 'echo $$ >'"$CG/$cg_name"'/cgroup.procs && exec "$@"' sh "$@"
}

# cg_zero NAME WHEN: one check: no msvm region holds a charge of cgroup
# NAME any more (WHEN says after what). Prints dmem.current.
cg_zero() {
	echo "cgroup $1 dmem.current $2 (dmem.peak: the most it held):"
	sed 's/^/  current /' $CG/"$1"/dmem.current
	sed 's/^/  peak /' $CG/"$1"/dmem.peak
	if awk '$1 ~ /^drm\// && $2 != 0 { bad = 1 } END { exit bad }' $CG/"$1"/dmem.current; then
		echo "msvm-tests: 1 passed, 0 failed (cgroup $1: no charge left $2)"
	else
		echo "msvm-tests: 0 passed, 1 failed (cgroup $1: charges left $2)"
		return 1
	fi
}

# cg_peak NAME BYTES WHAT: one check: cgroup NAME's dmem.peak on some msvm
# region reached BYTES (its dmem.max there: WHAT reached the limit).
cg_peak() {
	if awk -v want="$2" '$1 ~ /^drm\// && $2 >= want { hit = 1 } END { exit !hit }' $CG/"$1"/dmem.peak; then
		echo "msvm-tests: 1 passed, 0 failed (cgroup $1: $3 reached dmem.max $2 on a device)"
	else
		echo "msvm-tests: 0 passed, 1 failed (cgroup $1: $3 never reached dmem.max $2 on any device)"
		return 1
	fi
}

# cg_gone NAME: one check: cgroup NAME is removed and freed within 10 s. A
# charge never undone keeps a reference to it for good: the root's
# nr_dying_descendants would not come back to 0.
cg_gone() {
	rmdir $CG/"$1" || return 1
	i=0
	while grep -q '^nr_dying_descendants [1-9]' $CG/cgroup.stat; do
		i=$((i + 1))
		if [ $i -gt 100 ]; then
			cat $CG/cgroup.stat
			echo "msvm-tests: 0 passed, 1 failed (cgroup $1 still dying after 10 s: a charge was never undone)"
			return 1
		fi
		sleep 0.1
	done
	echo "msvm-tests: 1 passed, 0 failed (cgroup $1 freed: no charge held it)"
}

# run_ze: the Level Zero driver through Debian's loader (build.sh ze; an
# initramfs without it says so and fails): its tests with the validation
# layer on, the 1.9 advice values without it (the 1.8 layer refuses them),
# and tools/ze-example. Each prints "msvm-tests: N passed, M failed".
run_ze() {
	if [ ! -x /msvm/ze/ze-tests ]; then
		echo "msvm-tests: 0 passed, 1 failed (Level Zero: not in the initramfs)"
		return 1
	fi
	zrc=0
	export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu
	export ZE_ENABLE_ALT_DRIVERS=/msvm/ze/libze_msvm.so.1
	echo "== Level Zero: ze-tests (validation layer on)"
	ZE_ENABLE_VALIDATION_LAYER=1 ZE_ENABLE_PARAMETER_VALIDATION=1 \
		ZE_ENABLE_HANDLE_LIFETIME=1 timeout 600 /msvm/ze/ze-tests || zrc=1
	echo "== Level Zero: ze-tests system-advice (no validation layer)"
	timeout 300 /msvm/ze/ze-tests system-advice || zrc=1
	echo "== Level Zero: ze-example (tools/ze-example)"
	if ZE_ENABLE_VALIDATION_LAYER=1 ZE_ENABLE_PARAMETER_VALIDATION=1 timeout 300 /msvm/ze/ze-example; then
		echo "msvm-tests: 1 passed, 0 failed (ze-example)"
	else
		echo "msvm-tests: 0 passed, 1 failed (ze-example)"
		zrc=1
	fi
	unset LD_LIBRARY_PATH ZE_ENABLE_ALT_DRIVERS
	return $zrc
}
