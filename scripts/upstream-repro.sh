#!/usr/bin/env bash
# `make upstream-repro`: the reproducer of Linux 7.3's zap_huge_pmd() bug
# (Documentation/upstream/zap_huge_pmd.rst), run on the stock debug kernel
# and on a debug kernel built from a copy of the source with the one-line
# fix (Documentation/upstream/zap_huge_pmd.patch) applied; prints the two
# outcomes side by side. Not part of `make test`. The patched tree and its
# build live in the cache ($MSVM_CACHE/linux-7.3-zapfix, build-zapfix); the
# first run builds that kernel (about as long as the debug kernel).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
export MSVM_VARIANT=debug
B=$MSVM_TOP/build
SECS=${MSVM_REPRO_SECS:-20}

"$MSVM_TOP/scripts/setup.sh" debug
stock=$MSVM_CACHE/build-debug
psrc=$MSVM_CACHE/linux-7.3-zapfix
pdir=$MSVM_CACHE/build-zapfix
patch_file=$MSVM_TOP/Documentation/upstream/zap_huge_pmd.patch

patched_kernel() {
	if [ ! -f "$psrc/.msvm-patched" ]; then
		rm -rf "$psrc"
		# Hard links share the unpatched files; the patched one is a copy.
		cp -al "$MSVM_KSRC" "$psrc"
		cp --remove-destination "$MSVM_KSRC/mm/huge_memory.c" "$psrc/mm/huge_memory.c"
		patch -d "$psrc" -p1 <"$patch_file"
		touch "$psrc/.msvm-patched"
	fi
	mkdir -p "$pdir"
	cp "$stock/.config" "$pdir/.config"
	local mk=(make -C "$psrc" O="$pdir" $(msvm_kmake_args))
	"${mk[@]}" -s olddefconfig
	msvm_log "building the patched debug kernel in $pdir (log: $pdir/build.log)"
	"${mk[@]}" -j"$(nproc)" bzImage modules >"$pdir/build.log" 2>&1 ||
		{ tail -30 "$pdir/build.log" >&2; msvm_die "patched kernel build failed"; }
}
msvm_stage patched-kernel patched_kernel

mkdir -p "$B"
msvm_stage repro-build gcc -static -O2 -Wall -pthread -o "$B/zap_huge_pmd_repro" \
	-I "$MSVM_KSRC" "$MSVM_TOP/tests/upstream/zap_huge_pmd_repro.c"

# One initramfs per kernel: busybox, the guest scripts, that kernel's
# test_hmm.ko and the reproducer.
initramfs() { # KDIR OUT
	local root
	root=$(mktemp -d)
	mkdir -p "$root"/{bin,dev,proc,sys,tmp,msvm/bin,msvm/guest}
	cp /bin/busybox "$root/bin/busybox"
	cp "$MSVM_TOP"/tests/guest/* "$root/msvm/guest/"
	mv "$root/msvm/guest/init" "$root/init"
	chmod +x "$root/init" "$root"/msvm/guest/*
	cp "$(find "$1/lib" -name test_hmm.ko | head -1)" "$root/msvm/"
	cp "$B/zap_huge_pmd_repro" "$root/msvm/bin/"
	(cd "$root" && find . | cpio -o -H newc --quiet) >"$2"
	rm -rf "$root"
}

run() { # NAME KDIR
	initramfs "$2" "$B/repro-$1.cpio"
	local rc=0
	python3 "$MSVM_TOP/scripts/vm.py" --kernel "$2/arch/x86/boot/bzImage" \
		--initrd "$B/repro-$1.cpio" --gpus "" --mem 1G --cmd zap-repro --quiet \
		--append "msvm_repro_secs=$SECS" --log "$B/repro-$1-console.log" \
		--timeout $((SECS + 240)) >"$B/repro-$1.out" 2>&1 || rc=$?
	local line
	line=$(grep -ahoE 'zap_huge_pmd_repro: (PASS|FAIL)[^[:cntrl:]]*' "$B/repro-$1-console.log" | tail -1)
	local splat
	splat=$(grep -ahoE 'kernel BUG at [^ ]+|BUG: [A-Za-z -]+|WARNING: CPU: [0-9]+ PID: [0-9]+ at [^ ]+' \
		"$B/repro-$1-console.log" | head -1)
	printf '%-8s guest exit %-3s %s\n' "$1" "$rc" "${splat:+$splat; }${line:-no verdict (the guest died or hung)}"
	[ "$rc" = 0 ] && [ -z "$splat" ] && [ -n "$line" ] && [[ $line == *PASS* ]]
}

echo
echo "== zap_huge_pmd() reproducer, $SECS s each (test_hmm 2 MiB folios + MADV_DONTNEED)"
stock_ok=0 patched_ok=0
run stock "$stock" && stock_ok=1
run patched "$pdir" && patched_ok=1
echo
if [ $stock_ok = 0 ] && [ $patched_ok = 1 ]; then
	echo "upstream-repro: the stock kernel fails, the patched one passes: as expected"
	exit 0
fi
echo "upstream-repro: unexpected: stock $([ $stock_ok = 1 ] && echo passed || echo failed)," \
	"patched $([ $patched_ok = 1 ] && echo passed || echo failed)"
exit 1
