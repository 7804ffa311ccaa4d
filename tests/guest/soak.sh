#!/bin/sh
# `make soak`'s guest: the mixed run (msvm-tests soak: stress workers on THP
# and 4 KiB regions with zaps, munmaps, fork/exit children; a GPU unbound
# and bound again, then hot-unplugged and re-plugged, over and over; memory
# pressure), then rmmod and, on a kernel with kmemleak, a leak scan.
. /msvm/guest/lib.sh
rc=0
kmemleak_start
echo "== msvm: insmod (its defaults: 4 KiB device pages only)"
load_msvm || exit 1
secs=${msvm_soak_secs:-600}
# Eviction racing processes that go away, first: the stress run and the
# fuzzer in cgroups whose dmem.max they reach (4M and 1M on every device:
# processes of one cgroup evict each other's pages while a victim is
# killed), and the full-device stress (processes placing pages there and
# exiting while the others' make room).
part=${msvm_soak_part_secs:-120}
echo "== msvm-tests stress ($part s, 3 processes x 2 threads; in a cgroup with dmem.max 4M on every device)"
cg_new soakstress 4M || rc=1
cg_run soakstress msvm-tests stress "$part" 3 2 >/tmp/cgstress.log 2>&1 || rc=1
grep -v '^ok ' /tmp/cgstress.log
cg_peak soakstress 4194304 "the stress run" || rc=1
cg_zero soakstress "after the stress run" || rc=1
cg_gone soakstress || rc=1
awk '/^# stress-proc/ { o += $3; b += $4 }
	END { printf "soak-cgroup-stress: %d operations, %d MiB verified\n", o, b / 1048576 }' /tmp/cgstress.log
echo "== msvm-tests fuzz (seed ${msvm_fuzz_seed:-7}, 300000 calls; in a cgroup with dmem.max 1M on every device)"
cg_new soakfuzz 1M || rc=1
cg_run soakfuzz msvm-tests fuzz "${msvm_fuzz_seed:-7}" 300000 "$part" || rc=1
cg_zero soakfuzz "after the fuzzer" || rc=1
cg_gone soakfuzz || rc=1
echo "== msvm-tests oversub-stress ($part s)"
msvm-tests oversub-stress "$part" || rc=1
echo "== msvm-tests tenant-stall (2000 faulting jobs against another tenant's invalidations)"
msvm-tests tenant-stall 2000 || rc=1
echo "== msvm-tests orphans 20 (gpu0 unbound while a fork child alone maps pages its exited parent moved there: the child exits inside the teardown, or reads them back)"
msvm-tests orphans 20 || rc=1
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
# The policies' state at the issue's scale (make test runs 2,048 and 8 x
# 256): 16,384 live blocks in one process, 8 processes x 2,048.
echo "== msvm-tests policy-scale 16384 8 2048 (msvm loaded with access_threshold=1)"
load_msvm access_threshold=1 || exit 1
msvm-tests policy-scale 16384 8 2048 || rc=1
unload_msvm || rc=1
kmemleak_check || rc=1
exit $rc
