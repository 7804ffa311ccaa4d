#!/bin/sh
# A guest of "make test" of its own (four msvm-gpus): the last one's device
# process killed under a job (it stays dead until the guest powers off),
# then msvm unloaded. A fresh guest: after the small-RAM guest's memory
# pressure, QEMU 11.1's vfio-user client aborted at the kill (testing.rst).
. /msvm/guest/lib.sh
rc=0
echo "== msvm: insmod"
# A job's watchdog of 10 s: the job, queued behind a WAIT, must see its
# device die first.
load_msvm job_watchdog_ms=10000 || exit 1
echo "== msvm-tests device-lost (the last GPU's device process killed under a job)"
msvm-tests device-lost || rc=1
echo "== msvm: rmmod"
rmmod msvm || rc=1
exit $rc
