#!/usr/bin/env bash
# `make soak`: the stress run and the fuzzer under cgroup limits they reach,
# the full-device stress (2 minutes each), then the mixed run
# (tests/guest/soak.sh, msvm-tests soak) for
# MSVM_SOAK_SECS seconds (default 600) on each kernel of MSVM_SOAK_KERNELS
# (default: debug, then release), one boot each; then the outcomes side by
# side. Any failure, lost byte or kernel report fails it.
set -euo pipefail
unset KDIR # for make module KDIR=...; this uses the project's kernels
source "$(dirname "$0")/lib.sh"
B=$MSVM_TOP/build
mkdir -p "$B"
SECS=${MSVM_SOAK_SECS:-600}
rc=0
declare -A result
for k in ${MSVM_SOAK_KERNELS:-debug release}; do
	export MSVM_VARIANT=$k
	MSVM_KDIR=$MSVM_CACHE/build-$k
	export MSVM_KDIR
	"$MSVM_TOP/scripts/setup.sh" "$k"
	msvm_stage "module-$k" "$MSVM_TOP/scripts/build.sh" module >/dev/null
	msvm_stage tools "$MSVM_TOP/scripts/build.sh" tools
	msvm_stage device "$MSVM_TOP/scripts/build.sh" device
	"$MSVM_TOP/scripts/mkinitramfs.sh" "$B/soak-$k.cpio"
	krc=0
	msvm_stage "soak-$k" python3 "$MSVM_TOP/scripts/vm.py" --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
		--initrd "$B/soak-$k.cpio" --gpus sw,sw,rp --cmd soak \
		--append "msvm_soak_secs=$SECS" \
		--log "$B/soak-$k-console.log" --timeout $((SECS + 1800)) || krc=$?
	[ "$krc" = 0 ] || rc=1
	result[$k]="exit $krc; $(grep -h '^soak: ' "$B/soak-$k-console.log" | tr '\n' ' ')"
done
echo
echo "== make soak ($SECS s each)"
for k in ${MSVM_SOAK_KERNELS:-debug release}; do
	echo "$k kernel: ${result[$k]}"
done
exit $rc
