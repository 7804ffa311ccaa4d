#!/usr/bin/env bash
# Runs the kernel's own hmm-tests (tools/testing/selftests/mm/hmm-tests.c,
# built static from the kernel source) against test_hmm.ko in a guest: the
# reference suite for device-private memory, and msvm's benchmark baseline.
# MSVM_HMM_FILTER=NAME runs only the matching cases.
set -euo pipefail
unset KDIR # for make module KDIR=...; this uses the project's kernels
source "$(dirname "$0")/lib.sh"
export MSVM_VARIANT=release
MSVM_KDIR=$MSVM_CACHE/build-release
B=$MSVM_TOP/build

"$MSVM_TOP/scripts/setup.sh" release
msvm_stage module "$MSVM_TOP/scripts/build.sh" module >/dev/null
msvm_stage tools "$MSVM_TOP/scripts/build.sh" tools
msvm_stage hmm-tests-build "$MSVM_TOP/scripts/build.sh" hmm-tests
"$MSVM_TOP/scripts/mkinitramfs.sh" "$B/hmm-initramfs.cpio"
rc=0
python3 "$MSVM_TOP/scripts/vm.py" --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
	--initrd "$B/hmm-initramfs.cpio" --gpus "" --mem 2G --cmd hmm-tests --quiet-boot \
	--append "${MSVM_HMM_FILTER:+msvm_hmm_filter=$MSVM_HMM_FILTER}" \
	--log "$B/hmm-tests-console.log" --timeout "${MSVM_HMM_TIMEOUT:-1200}" || rc=$?
log=$B/hmm-tests-console.log
echo "hmm-tests: $(grep -E '^ok [0-9]+ ' "$log" | grep -vc '# SKIP') passed," \
	"$(grep -cE '^not ok [0-9]+ ' "$log") failed, $(grep -E '^ok [0-9]+ ' "$log" | grep -c '# SKIP') skipped" \
	"(guest exit $rc)"
exit $rc
