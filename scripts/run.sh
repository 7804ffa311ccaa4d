#!/usr/bin/env bash
# The README's run command: set everything up, boot a guest with three
# emulated GPUs (two behind one PCIe switch, one on its own root port), load
# msvm and show what it drives (`msvm info`).
set -euo pipefail
unset KDIR # for make module KDIR=...; this uses the project's kernels
source "$(dirname "$0")/lib.sh"
export MSVM_VARIANT=release
MSVM_KDIR=$MSVM_CACHE/build-release

"$MSVM_TOP/scripts/setup.sh" release
msvm_stage module "$MSVM_TOP/scripts/build.sh" module >/dev/null
msvm_stage tools "$MSVM_TOP/scripts/build.sh" tools
msvm_stage device "$MSVM_TOP/scripts/build.sh" device
mkdir -p "$MSVM_TOP/build"
"$MSVM_TOP/scripts/mkinitramfs.sh" "$MSVM_TOP/build/run-initramfs.cpio"
exec python3 "$MSVM_TOP/scripts/vm.py" --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
	--initrd "$MSVM_TOP/build/run-initramfs.cpio" --gpus "${MSVM_GPUS:-sw,sw,rp}" \
	--cmd run --log "$MSVM_TOP/build/run-console.log" --timeout 300 \
	$([ -n "${MSVM_VERBOSE:-}" ] || echo --quiet-boot)
