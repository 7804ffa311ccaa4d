#!/bin/sh
# The README's "make bench", guest side of its 8-GPU boot (two NUMA nodes,
# a host bridge each): what QUERY, VM creation, an invalidation, STATS and
# unplug cost on 3 devices and on 8.
. /msvm/guest/lib.sh
dmesg -n 4
rc=0
load_msvm || exit 1
msvm-tests bench-scale8 || rc=1
unload_msvm >/dev/null || rc=1
exit $rc
