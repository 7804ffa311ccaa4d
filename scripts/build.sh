#!/usr/bin/env bash
# Builds msvm's parts against the cached kernel (run scripts/setup.sh first;
# the Makefile does), or, with KDIR=<tree> in the environment, msvm.ko
# against that kernel build tree of the user's own (make module KDIR=...,
# dkms; no set-up; RUSTC, BINDGEN, LLVM override the toolchain it picks).
# The kernel tree is checked before anything is compiled
# (scripts/check-kdir.sh).
#   build.sh module        msvm.ko and msvm_dmirror.ko (CLIPPY=1 runs clippy)
#   build.sh rustfmtcheck  rustfmt --check over the module crate
#   build.sh tools         the user-space workspace (static binaries)
#   build.sh device        msvm-gpu, the PCIe GPU model (a host program)
#   build.sh hmm-tests     the kernel's hmm-tests selftest, static
#   build.sh hmm-bench     the test_hmm side of make bench, static
#   build.sh c-example     the uAPI walk-through for runtime authors, static
#   build.sh ze            the Level Zero driver (libze_msvm.so.1), its
#                          guest tests and tools/ze-example, dynamic (the
#                          loader is a shared library), into build/ze/
set -euo pipefail
source "$(dirname "$0")/lib.sh"

if [ -n "${KDIR:-}" ]; then
	msvm_use_kdir "$KDIR"
else
	[ -f "$MSVM_KDIR/Module.symvers" ] ||
		msvm_die "no built kernel in $MSVM_KDIR: run 'scripts/setup.sh $MSVM_VARIANT' (or make setup)"
fi

kmake() {
	make -C "$MSVM_KDIR" M="$MSVM_TOP" $(msvm_kmake_args) "$@"
}

# The tree and toolchain, checked as kmake will use them.
check_kdir() {
	RUSTC=$MSVM_RUSTC BINDGEN=$MSVM_BINDGEN LLVM=$MSVM_LLVM CLIPPY_DRIVER=$MSVM_CLIPPY_DRIVER \
		"$MSVM_TOP/scripts/check-kdir.sh" "$MSVM_KDIR"
}

case ${1:-module} in
module)
	check_kdir
	kmake ${CLIPPY:+CLIPPY=1} -j"$(nproc)" modules
	;;
clippy)
	check_kdir
	# Rebuild the Rust objects so that clippy sees them.
	rm -f "$MSVM_TOP"/src/msvm_main.o "$MSVM_TOP"/dmirror/msvm_dmirror.o
	kmake CLIPPY=1 -j"$(nproc)" modules 2>&1 | tee "$MSVM_TOP/build/clippy.log"
	if grep -qE '^(warning|error)' "$MSVM_TOP/build/clippy.log"; then
		msvm_die "clippy found problems (see above)"
	fi
	;;
rustfmtcheck)
	rustfmt --check --edition 2021 --config-path "$MSVM_KSRC/.rustfmt.toml" \
		"$MSVM_TOP"/src/msvm_main.rs "$MSVM_TOP"/dmirror/msvm_dmirror.rs
	;;
rustfmt)
	rustfmt --edition 2021 --config-path "$MSVM_KSRC/.rustfmt.toml" "$MSVM_TOP"/src/msvm_main.rs \
		"$MSVM_TOP"/dmirror/msvm_dmirror.rs
	;;
tools)
	(cd "$MSVM_TOP/tools" && cargo build --release --locked --quiet)
	;;
device)
	# A host program, its own workspace (no static flag, no guest target).
	(cd "$MSVM_TOP/device" && cargo build --release --locked --quiet)
	;;
hmm-tests)
	# The kernel's own device-private test suite, built static from the
	# kernel source against the kernel's exported headers.
	src=$MSVM_KSRC/tools/testing/selftests/mm
	out=$MSVM_TOP/build/hmm-tests
	if [ ! -x "$out" ] || [ "$src/hmm-tests.c" -nt "$out" ]; then
		mkdir -p "$MSVM_TOP/build"
		# As tools/testing/selftests/mm/Makefile builds it, but static.
		gcc -static -O2 -U_FORTIFY_SOURCE -o "$out" -I "$MSVM_KSRC" \
			-isystem "$MSVM_KDIR/usr/include" -I "$MSVM_KSRC/tools/include" \
			-I "$MSVM_KSRC/tools/testing/selftests" -I "$src" \
			"$src/hmm-tests.c" "$src/vm_util.c" "$src/hugepage_settings.c" \
			-lrt -lpthread -lm
	fi
	;;
hmm-bench)
	# The baseline of make bench, against the kernel source's test_hmm uAPI.
	out=$MSVM_TOP/build/hmm-bench
	mkdir -p "$MSVM_TOP/build"
	gcc -static -O2 -Wall -o "$out" -I "$MSVM_KSRC" -isystem "$MSVM_KDIR/usr/include" \
		"$MSVM_TOP/tests/bench/hmm_bench.c"
	;;
c-example)
	# tools/c-example: the uAPI header and the kernel's drm.h, nothing else.
	out=$MSVM_TOP/build/msvm-example
	mkdir -p "$MSVM_TOP/build"
	gcc -static -O2 -Wall -Wextra -Werror -o "$out" -I "$MSVM_TOP/include/uapi/drm" \
		-isystem "$MSVM_KDIR/usr/include/drm" -isystem "$MSVM_KDIR/usr/include" \
		"$MSVM_TOP/tools/c-example/msvm_example.c"
	;;
ze)
	# Its own workspace: a cdylib, which the tools' +crt-static forbids;
	# an empty RUSTFLAGS replaces the config's.
	(cd "$MSVM_TOP/tools/ze-msvm" && RUSTFLAGS= cargo build --release --locked --quiet)
	out=$MSVM_TOP/build/ze
	rel=$MSVM_TOP/tools/ze-msvm/target/x86_64-unknown-linux-gnu/release
	mkdir -p "$out"
	cp "$rel/libze_msvm.so" "$out/libze_msvm.so.1"
	cp "$rel/ze-tests" "$out/ze-tests"
	gcc -O2 -Wall -Wextra -Werror -o "$out/ze-example" \
		"$MSVM_TOP/tools/ze-example/ze_example.c" -lze_loader
	;;
*)
	msvm_die "unknown build target '$1'"
	;;
esac
