#!/bin/sh
# Development aid: loads msvm and runs the Level Zero tests alone (they run
# in the main guest of "make test" too); with msvm_ze=ARG on the kernel
# command line, "ze-tests ARG" instead (e.g. msvm_ze=bench, without the
# validation layer).
. /msvm/guest/lib.sh
load_msvm || exit 1
if [ -n "${msvm_ze:-}" ]; then
	LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu ZE_ENABLE_ALT_DRIVERS=/msvm/ze/libze_msvm.so.1 \
		/msvm/ze/ze-tests "$msvm_ze"
else
	run_ze
fi
