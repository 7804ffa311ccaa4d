# shellcheck shell=bash
# Common settings for msvm's scripts. Sourced, never run.
#
# The kernel major version is pinned here and nowhere else.
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
# Kernel variant: "release" (run, bench) or "debug" (tests). One build tree each.
MSVM_VARIANT=${MSVM_VARIANT:-release}
MSVM_KDIR=$MSVM_CACHE/build-$MSVM_VARIANT
export LIBCLANG_PATH=/usr/lib/llvm-22/lib

# Arguments every kernel-tree make gets.
msvm_kmake_args() {
	printf '%s\n' "LLVM=$MSVM_LLVM" "RUSTC=$MSVM_RUSTC" "BINDGEN=$MSVM_BINDGEN" \
		"HOSTRUSTC=$MSVM_RUSTC" "CLIPPY_DRIVER=/usr/bin/clippy-driver"
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
