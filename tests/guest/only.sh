#!/bin/sh
# Development aid: loads msvm and runs msvm-tests with the arguments in
# msvm_only= (kernel command line; commas stand for spaces), e.g.
#   python3 scripts/vm.py ... --cmd only --append msvm_only=placement
#   python3 scripts/vm.py ... --cmd only --append msvm_only=unplug-loop,3
# msvm_params= are the module's parameters, the same way (e.g.
# msvm_params=large_folios=1,evict=0).
. /msvm/guest/lib.sh
# shellcheck disable=SC2046 # split on purpose
load_msvm $(echo "${msvm_params:-}" | tr ',' ' ') || exit 1
# msvm_dump_after=SECS: if the run is still going after SECS, dump every
# task's state to the console (needs CONFIG_MAGIC_SYSRQ, as in a kernel
# built to chase a hang; without it this says so once).
if [ -n "${msvm_dump_after:-}" ]; then
	(
		sleep "$msvm_dump_after"
		if [ -w /proc/sysrq-trigger ]; then
			echo "== msvm_dump_after: blocked tasks, CPUs, all tasks"
			for k in w l t; do echo "$k" >/proc/sysrq-trigger; sleep 2; done
		else
			echo "== msvm_dump_after: no /proc/sysrq-trigger in this kernel"
		fi
	) &
fi
# shellcheck disable=SC2046 # split on purpose
msvm-tests $(echo "${msvm_only:-}" | tr ',' ' ')
