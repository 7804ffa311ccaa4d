#!/bin/sh
# Development aid: loads msvm and runs the msvm-tests whose names contain
# msvm_only= (kernel command line), e.g.
#   python3 scripts/vm.py ... --cmd only --append msvm_only=placement
. /msvm/guest/lib.sh
load_msvm || exit 1
msvm-tests "${msvm_only:-}"
