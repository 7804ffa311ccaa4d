# SPDX-License-Identifier: GPL-2.0
#
# msvm's user-facing targets. Kbuild (not this file) describes the module to
# the kernel build; every target here sets up what it needs first (but make
# module KDIR=..., which builds against a kernel of your own).
#
#   make run           boot 3 emulated GPUs, load msvm, show `msvm info`
#   make test          everything: host tests, lints, build checks (KDIR=,
#                      DKMS), KUnit + guest tests
#   make bench         msvm vs test_hmm vs memcpy, one boot, GiB/s and ratios
#   make soak          10-minute mixed run (stress, unplug/replug, memory
#                      pressure) on the debug and the release kernel
#   make fuzz          make test with a long fuzz (2M calls) and stress (10 min)
#   make setup         packages, bindgen, kernel source, guest kernel (cached)
#   make module        build msvm.ko against the cached kernel
#   make module KDIR=<kernel build tree>
#                      build msvm.ko against a Linux 7.3 kernel of your own
#                      (no set-up; the tree is checked first; dkms.conf)
#   make tools         build the user-space workspace (tools/)
#   make hmm-tests     the kernel's hmm-tests against test_hmm.ko and
#                      msvm_dmirror.ko (its Rust port on src/mm/), in a guest
#   make rust-mm       src/mm/ as a patch series against 7.3 (build/rust-mm/),
#                      built in a patched debug kernel with the port as
#                      samples/rust/rust_dmirror, hmm-tests against it
#   make rust-mm-bisect  each patch of that series built on those before
#                      it (CLIPPY=1), as a bisection would
#   make upstream-repro  Linux 7.3's two core bugs (zap_huge_pmd(),
#                      migrate_device_range()'s anon_vma): stock vs patched
#   make rustfmtcheck  rustfmt --check over the module
#   make clippy        the module under clippy (CLIPPY=1), warnings fail
#
# Variables: MSVM_VARIANT=release|debug (kernel), MSVM_CACHE (cache dir,
# default ~/.cache/msvm), MSVM_KVM=1 (use /dev/kvm instead of TCG); for
# make module KDIR=...: RUSTC, BINDGEN, LLVM (the toolchain of that kernel).

.PHONY: all run test bench soak fuzz setup module tools hmm-tests rust-mm rust-mm-bisect upstream-repro rustfmtcheck rustfmt clippy clean

all: module

# dkms adds CC=clang LD=ld.lld to the make command for a clang-built kernel;
# they would reach the kernel's make through MAKEFLAGS and override the
# LLVM= toolchain scripts/build.sh passes (which sets every tool).
MAKEOVERRIDES := $(filter-out CC=% LD=%,$(MAKEOVERRIDES))

run:
	scripts/run.sh

test:
	scripts/test.sh

bench:
	scripts/bench.sh

soak:
	scripts/soak.sh

fuzz:
	MSVM_TEST_TIMEOUT=7200 MSVM_GUEST_ARGS="msvm_fuzz_calls=2000000 msvm_fuzz_secs=3600 msvm_stress_secs=600 msvm_fuzz_seed=$$(date +%s)" scripts/test.sh

setup:
	scripts/setup.sh $(MSVM_VARIANT)

module: $(if $(KDIR),,setup)
	KDIR='$(KDIR)' scripts/build.sh module

tools:
	scripts/build.sh tools

hmm-tests:
	scripts/hmm-tests.sh

rust-mm:
	scripts/rust-mm.sh

rust-mm-bisect:
	scripts/rust-mm.sh --bisect

upstream-repro:
	scripts/upstream-repro.sh

rustfmtcheck:
	scripts/build.sh rustfmtcheck

rustfmt:
	scripts/build.sh rustfmt

clippy:
	scripts/build.sh clippy

clean:
	rm -rf build tools/target tools/ze-msvm/target
	rm -f msvm.ko msvm.o msvm.mod msvm.mod.c msvm.mod.o .module-common.o \
		modules.order Module.symvers src/*.o src/mm/bindings_generated.rs
	find . -name '.*.cmd' -delete
