#!/usr/bin/env bash
# `make rust-mm`: the glue as a patch series against Linux 7.3
# (scripts/rust-mm-series.py writes it to build/rust-mm/), applied to a copy
# of the cached kernel source, built as the debug kernel with
# CONFIG_SAMPLES_RUST and the port as samples/rust/rust_dmirror (a module),
# and the kernel's unmodified hmm-tests run against test_hmm.ko and
# rust_dmirror.ko of that kernel, side by side, as make hmm-tests does for
# msvm_dmirror.ko (Documentation/upstream/rust-mm.rst). Not part of
# `make test`. The patched tree and its build live in the cache
# ($MSVM_CACHE/linux-7.3-rustmm, build-rustmm); the first run builds that
# kernel (about as long as the debug kernel), later ones what changed.
set -euo pipefail
unset KDIR
export MSVM_VARIANT=debug
source "$(dirname "$0")/lib.sh"
B=$MSVM_TOP/build

"$MSVM_TOP/scripts/setup.sh" debug
stock=$MSVM_CACHE/build-debug
psrc=$MSVM_CACHE/linux-7.3-rustmm
pdir=$MSVM_CACHE/build-rustmm
series=$B/rust-mm

msvm_stage series python3 "$MSVM_TOP/scripts/rust-mm-series.py" "$MSVM_KSRC" "$series"

patched_kernel() {
	local stamp p f
	stamp=$(cat "$series"/0*.patch | grep -v '^From [0-9a-f]\{40\} ' | sha256sum | cut -d' ' -f1)
	if [ "$(cat "$psrc/.msvm-patched" 2>/dev/null)" != "$stamp" ]; then
		# Hard links share the unpatched files; the patched ones are copies
		# (new files are created, not linked, by patch).
		local fresh
		fresh=$(mktemp -d "$MSVM_CACHE/rustmm.XXXXXX")
		cp -al "$MSVM_KSRC/." "$fresh/"
		for f in $(grep -h '^+++ b/' "$series"/0*.patch | sed 's|^+++ b/||' | sort -u); do
			[ -e "$fresh/$f" ] && cp --remove-destination "$MSVM_KSRC/$f" "$fresh/$f"
		done
		for p in "$series"/0*.patch; do
			[ "$(basename "$p")" = 0000-cover-letter.patch ] && continue
			patch -s -d "$fresh" -p1 <"$p"
		done
		# Keep the old tree's timestamps out: sources the series did not
		# change keep theirs (links), so the build redoes only what changed.
		echo "$stamp" >"$fresh/.msvm-patched"
		rm -rf "$psrc"
		mv "$fresh" "$psrc"
	fi
	mkdir -p "$pdir"
	cp "$stock/.config" "$pdir/.config"
	"$psrc/scripts/config" --file "$pdir/.config" -e SAMPLES -e SAMPLES_RUST -m SAMPLE_RUST_DMIRROR
	local mk=(make -C "$psrc" O="$pdir" $(msvm_kmake_args))
	"${mk[@]}" -s olddefconfig
	grep -q '^CONFIG_SAMPLE_RUST_DMIRROR=m' "$pdir/.config" ||
		msvm_die "CONFIG_SAMPLE_RUST_DMIRROR did not stay set (its dependencies?)"
	msvm_log "building the patched debug kernel in $pdir (log: $pdir/build.log)"
	"${mk[@]}" -j"$(nproc)" bzImage modules >"$pdir/build.log" 2>&1 ||
		{ grep -E '^(error|warning)' -A12 "$pdir/build.log" | head -80 >&2
		  tail -20 "$pdir/build.log" >&2; msvm_die "patched kernel build failed"; }
	if grep -E '^(warning|error)' "$pdir/build.log" | grep -q .; then
		grep -E '^(warning|error)' -A8 "$pdir/build.log" | head -60
		msvm_die "the patched kernel built with warnings (above)"
	fi
}
msvm_stage patched-kernel patched_kernel

# --bisect (make rust-mm-bisect): each patch of the series must build on
# the ones before it, warning-free and clippy-clean (CLIPPY=1), as a
# bisection of the series would build it. The patched tree is taken back
# to the first patch (patch -R) and brought forward a patch at a time, the
# kernel (and, once the sample is in, the modules) built after each, in
# the same build directory (so each step rebuilds what that patch
# changed). The tree ends as the whole series again.
bisect() {
	local all=() p k n t0 log what warn
	for p in "$series"/0*.patch; do
		[ "$(basename "$p")" = 0000-cover-letter.patch ] || all+=("$p")
	done
	n=${#all[@]}
	echo "bisecting" >"$psrc/.msvm-patched"
	for (( k = n - 1; k >= 1; k-- )); do
		patch -s -R -d "$psrc" -p1 <"${all[$k]}"
	done
	local mk=(make -C "$psrc" O="$pdir" $(msvm_kmake_args) CLIPPY=1)
	for (( k = 0; k < n; k++ )); do
		p=${all[$k]}
		[ "$k" = 0 ] || patch -s -d "$psrc" -p1 <"$p"
		what=vmlinux
		grep -q '^+++ b/samples/' "$p" && what="vmlinux modules"
		if ! grep -qE '^\+\+\+ b/(rust|samples|include)/' "$p"; then
			echo "rust-mm-bisect: $(basename "$p"): no code, not built"
			continue
		fi
		log=$pdir/bisect-$(basename "$p" .patch | cut -c1-4).log
		t0=$(date +%s)
		# The sample's option once its patch is in (olddefconfig drops an
		# option the tree does not know yet, and never asks).
		if grep -q '^config SAMPLE_RUST_DMIRROR' "$psrc/samples/rust/Kconfig"; then
			"$psrc/scripts/config" --file "$pdir/.config" -m SAMPLE_RUST_DMIRROR
		fi
		"${mk[@]}" -s olddefconfig </dev/null
		[ "$what" = vmlinux ] || rm -f "$pdir/samples/rust/rust_dmirror.ko"
		# shellcheck disable=SC2086
		"${mk[@]}" -j"$(nproc)" $what </dev/null >"$log" 2>&1 ||
			{ grep -E '^(error|warning)' -A12 "$log" | head -80 >&2
			  msvm_die "rust-mm-bisect: $(basename "$p") does not build (log: $log)"; }
		# Warnings in the series' own files (clippy's too; it may warn on
		# older kernel code, which is not this series' to fix).
		warn=$(grep -E '^ *--> |^[^ ]+:[0-9]+:[0-9]+: (warning|error)' "$log" |
			grep -E 'rust/kernel/mm(/|\.rs)|rust/helpers/mm_|samples/rust/rust_dmirror' || true)
		if [ -n "$warn" ]; then
			echo "$warn"
			msvm_die "rust-mm-bisect: $(basename "$p") builds with warnings (log: $log)"
		fi
		if [ "$what" != vmlinux ] && [ ! -f "$pdir/samples/rust/rust_dmirror.ko" ]; then
			msvm_die "rust-mm-bisect: $(basename "$p"): rust_dmirror.ko was not built"
		fi
		echo "rust-mm-bisect: $(basename "$p"): builds ($what, $(( $(date +%s) - t0 )) s)"
	done
	cat "$series"/0*.patch | grep -v '^From [0-9a-f]\{40\} ' | sha256sum | cut -d' ' -f1 >"$psrc/.msvm-patched"
	echo "rust-mm-bisect: each of the $n patches builds on those before it"
}
if [ "${1:-}" = --bisect ]; then
	msvm_stage bisect bisect
	exit 0
fi
msvm_stage hmm-tests-build "$MSVM_TOP/scripts/build.sh" hmm-tests

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,dev,proc,sys,tmp,msvm/bin,msvm/guest}
cp /bin/busybox "$root/bin/busybox"
cp "$MSVM_TOP"/tests/guest/* "$root/msvm/guest/"
mv "$root/msvm/guest/init" "$root/init"
chmod +x "$root/init" "$root"/msvm/guest/*
cp "$(find "$pdir/lib" -name test_hmm.ko | head -1)" "$root/msvm/"
cp "$pdir/samples/rust/rust_dmirror.ko" "$root/msvm/"
cp "$B/hmm-tests" "$root/msvm/bin/"
(cd "$root" && find . | cpio -o -H newc --quiet) >"$B/rust-mm.cpio"

log=$B/rust-mm-console.log
python3 "$MSVM_TOP/scripts/vm.py" --kernel "$pdir/arch/x86/boot/bzImage" \
	--initrd "$B/rust-mm.cpio" --gpus "" --mem 2G --cmd hmm-tests --quiet-boot \
	--append "msvm_hmm_modules=test_hmm,rust_dmirror${MSVM_HMM_FILTER:+ msvm_hmm_filter=$MSVM_HMM_FILTER}" \
	--log "$log" --timeout "${MSVM_HMM_TIMEOUT:-2400}" || true
rc=0
# The series' KUnit suites (rust_mm_*) run at boot, built in; the
# sample's when it loads: each must have run, and passed.
python3 "$MSVM_TOP/scripts/hmm-tests-report.py" "$log" test_hmm rust_dmirror \
	rust_mm_owner,rust_mm_page,rust_mm_numa,rust_mm_freemap,rust_mm_hmm,rust_mm_inflight,rust_mm_pagetable,rust_mm_pagemap,rust_mm_backing,rust_mm_mmap,rust_mm_cancel,rust_mm_misc,rust_mm_migrate,rust_mm_exclusive,rust_dmirror_memory ||
	rc=1
exit $rc
