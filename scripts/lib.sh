# shellcheck shell=bash
# Common settings for msvm's scripts. Sourced, never run.
#
# The kernel major version is pinned here and nowhere else (but dkms.conf's
# BUILD_EXCLUSIVE_KERNEL, which make test's dkms build keeps in step).
MSVM_KVER_MAJOR=7.3
MSVM_KSRC_PKG="linux-source-${MSVM_KVER_MAJOR}"
MSVM_KSRC_SUITE=trixie-backports

MSVM_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MSVM_CACHE=${MSVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/msvm}
MSVM_LLVM=/usr/lib/llvm-22/bin/
MSVM_RUSTC=/usr/bin/rustc
MSVM_BINDGEN_VER=0.72.1
MSVM_BINDGEN=$MSVM_CACHE/bindgen-$MSVM_BINDGEN_VER/bin/bindgen
MSVM_KSRC=$MSVM_CACHE/linux-$MSVM_KVER_MAJOR
MSVM_CLIPPY_DRIVER=/usr/bin/clippy-driver
# QEMU with the vfio-user client (10.1 or newer) for the msvm-gpu device
# model: Debian 13's backport, unpacked with its libraries into a private
# root in the cache (scripts/setup.sh, stage qemu) and run through that
# root's dynamic loader, since Debian 12's libc is older than it needs.
MSVM_QEMU_SUITE=trixie-backports
MSVM_QEMU_ROOT=$MSVM_CACHE/qemu
# scripts/vm.py runs these two.
export MSVM_QEMU=${MSVM_QEMU:-$MSVM_QEMU_ROOT/qemu-system-x86_64}
# The device model's binary (device/, built by scripts/build.sh device).
export MSVM_GPU_BIN=${MSVM_GPU_BIN:-$MSVM_TOP/device/target/release/msvm-gpu}
# Kernel variant: "release" (run, bench) or "debug" (tests). One build tree each.
MSVM_VARIANT=${MSVM_VARIANT:-release}
MSVM_KDIR=$MSVM_CACHE/build-$MSVM_VARIANT
MSVM_ENV_LIBCLANG_PATH=${LIBCLANG_PATH:-}
export LIBCLANG_PATH=/usr/lib/llvm-22/lib

# Arguments every kernel-tree make gets.
msvm_kmake_args() {
	[ -z "$MSVM_LLVM" ] || echo "LLVM=$MSVM_LLVM"
	printf '%s\n' "RUSTC=$MSVM_RUSTC" "BINDGEN=$MSVM_BINDGEN" \
		"HOSTRUSTC=$MSVM_RUSTC" "CLIPPY_DRIVER=$MSVM_CLIPPY_DRIVER"
}

# msvm_use_kdir DIR: build against DIR, a configured and built kernel tree
# of the user's own (make module KDIR=DIR, dkms), instead of the project's,
# with the toolchain that tree was built with: LLVM= only for a clang-built
# tree (the LLVM of its clang version if installed), the rustc (PATH's, else
# /usr/bin's) whose version is the tree's, the cached bindgen-cli, else
# PATH's. RUSTC, BINDGEN, LLVM, CLIPPY_DRIVER and LIBCLANG_PATH in the
# environment override each. scripts/check-kdir.sh says what does not fit.
# Only scripts/build.sh and scripts/check-kdir.sh call this: the scripts that
# boot the project's kernels ignore KDIR.
msvm_use_kdir() {
	local cfg c want major
	MSVM_KDIR=$(realpath -m -- "$1")
	cfg=$MSVM_KDIR/.config
	major=$(sed -n 's/^CONFIG_CLANG_VERSION=\([0-9]*\)[0-9][0-9][0-9][0-9]$/\1/p' "$cfg" 2>/dev/null)
	MSVM_LLVM=
	if grep -qx 'CONFIG_CC_IS_CLANG=y' "$cfg" 2>/dev/null; then
		if [ -n "${LLVM:-}" ]; then
			MSVM_LLVM=$LLVM
		elif [ -n "$major" ] && [ -x "/usr/lib/llvm-$major/bin/clang" ]; then
			MSVM_LLVM=/usr/lib/llvm-$major/bin/
		elif [ -n "$major" ] && command -v "clang-$major" >/dev/null; then
			MSVM_LLVM=-$major
		else
			MSVM_LLVM=1
		fi
	fi
	if [ -n "$MSVM_ENV_LIBCLANG_PATH" ]; then
		LIBCLANG_PATH=$MSVM_ENV_LIBCLANG_PATH
	elif [ -n "$major" ] && [ -d "/usr/lib/llvm-$major/lib" ]; then
		LIBCLANG_PATH=/usr/lib/llvm-$major/lib
	elif [ ! -d "$LIBCLANG_PATH" ]; then
		unset LIBCLANG_PATH # bindgen looks for a libclang itself
	fi
	if [ -n "${RUSTC:-}" ]; then
		MSVM_RUSTC=$RUSTC
	else
		want=$(sed -n 's/^CONFIG_RUSTC_VERSION_TEXT="\(.*\)"$/\1/p' "$cfg" 2>/dev/null)
		MSVM_RUSTC=
		for c in "$(command -v rustc)" /usr/bin/rustc; do
			[ -x "$c" ] || continue
			[ -n "$MSVM_RUSTC" ] || MSVM_RUSTC=$c
			if [ "$("$c" --version 2>/dev/null)" = "$want" ]; then
				MSVM_RUSTC=$c
				break
			fi
		done
		MSVM_RUSTC=${MSVM_RUSTC:-rustc}
	fi
	if [ -n "${CLIPPY_DRIVER:-}" ]; then
		MSVM_CLIPPY_DRIVER=$CLIPPY_DRIVER
	elif c=$(command -v "$MSVM_RUSTC") && [ -x "${c%/*}/clippy-driver" ]; then
		MSVM_CLIPPY_DRIVER=${c%/*}/clippy-driver
	else
		MSVM_CLIPPY_DRIVER=clippy-driver
	fi
	if [ -n "${BINDGEN:-}" ]; then
		MSVM_BINDGEN=$BINDGEN
	elif [ ! -x "$MSVM_BINDGEN" ]; then
		MSVM_BINDGEN=$(command -v bindgen || echo bindgen)
	fi
}

msvm_log() { printf '[msvm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
msvm_die() { printf '[msvm] error: %s\n' "$*" >&2; exit 1; }

# msvm_stage NAME CMD...: runs a stage and prints how long it took.
msvm_stage() {
	local name=$1 t0 rc
	shift
	t0=$(date +%s)
	msvm_log "stage '$name' ..."
	"$@"
	rc=$?
	msvm_log "stage '$name' done in $(( $(date +%s) - t0 )) s (rc=$rc)"
	return $rc
}
