#!/bin/sh
# The README's "make test", guest side: load msvm (its KUnit suites run at
# load and print KTAP on the console, parsed by the host), run the
# integration tests, the unbind/re-bind and hot-unplug tests, then rmmod.
. /msvm/guest/lib.sh
rc=0
echo "== msvm: insmod (KUnit suites run now)"
load_msvm || exit 1
echo "== msvm-tests"
msvm-tests || rc=1
echo "== msvm-tests unplug"
msvm-tests unplug || rc=1
echo "== rmmod msvm"
if rmmod msvm && [ ! -e /sys/bus/pci/drivers/msvm ] && ! ls /dev/dri/renderD* >/dev/null 2>&1; then
	echo "rmmod: ok (driver and render nodes gone)"
else
	echo "rmmod: FAILED"
	rc=1
fi
exit $rc
