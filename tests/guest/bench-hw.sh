#!/bin/sh
# The README's "make bench", guest side of its device-model boot: msvm-gpu's
# copy engine against the CPU's copies for the same migrations (debugfs
# copy_engine), 64 MiB, in 4 KiB pages and in 2 MiB folios; and its job
# engine against msvm's CPU engine for warm jobs (debugfs job_engine).
. /msvm/guest/lib.sh
dmesg -n 4
rc=0
thp=/sys/kernel/mm/transparent_hugepage/enabled
echo 0 >/proc/sys/vm/compaction_proactiveness
echo never >$thp
load_msvm || exit 1
echo "== copy engine against the CPU, 64 MiB, 4 KiB pages"
msvm-tests bench-hw 64 _4k || rc=1
echo "== job engine against the CPU engine, warm jobs over 64 MiB of VRAM"
msvm-tests bench-jobs 64 || rc=1
echo "== replayable faults: a 4 KiB job's fault round trip through the fault buffer"
msvm-tests bench-faults || rc=1
unload_msvm >/dev/null || rc=1
echo always >$thp
load_msvm large_folios=1 || exit 1
echo "== copy engine against the CPU, 64 MiB, 2 MiB folios (large_folios=1)"
msvm-tests bench-hw 64 _2m || rc=1
exit $rc
