#!/bin/sh
# Development aid: loads msvm and runs msvm-tests with the arguments in
# msvm_only= (kernel command line; commas stand for spaces), e.g.
#   python3 scripts/vm.py ... --cmd only --append msvm_only=placement
#   python3 scripts/vm.py ... --cmd only --append msvm_only=unplug-loop,3
. /msvm/guest/lib.sh
load_msvm || exit 1
# shellcheck disable=SC2046 # split on purpose
msvm-tests $(echo "${msvm_only:-}" | tr ',' ' ')
