#!/bin/sh
# The small-RAM guest of "make test" (512 MiB RAM, four 1 GiB GPUs): the
# shrinker under real memory pressure. Run after the main guest.
. /msvm/guest/lib.sh
rc=0
echo "== msvm: insmod"
load_msvm || exit 1
echo "== msvm-tests pressure"
msvm-tests pressure || rc=1
echo "== msvm: rmmod"
rmmod msvm || rc=1
exit $rc
