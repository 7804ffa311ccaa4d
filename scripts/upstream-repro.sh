#!/usr/bin/env bash
# `make upstream-repro`: the reproducers of Linux 7.3's two core bugs that
# msvm works around, zap_huge_pmd() (Documentation/upstream/zap_huge_pmd.rst)
# and migrate_device_range()'s anon_vma (migrate_device_anon_vma.rst), each
# run on the stock debug kernel and on a debug kernel built from a copy of
# the source with both fixes (the two .patch files there) applied; prints
# the outcomes side by side. Not part of `make test`. The patched tree and
# its build live in the cache ($MSVM_CACHE/linux-7.3-zapfix, build-zapfix);
# the first run builds that kernel (about as long as the debug kernel).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
export MSVM_VARIANT=debug
B=$MSVM_TOP/build
SECS=${MSVM_REPRO_SECS:-20}

"$MSVM_TOP/scripts/setup.sh" debug
stock=$MSVM_CACHE/build-debug
psrc=$MSVM_CACHE/linux-7.3-zapfix
pdir=$MSVM_CACHE/build-zapfix
patches=("$MSVM_TOP/Documentation/upstream/zap_huge_pmd.patch"
	"$MSVM_TOP/Documentation/upstream/migrate_device_anon_vma.patch")

patched_kernel() {
	local stamp
	stamp=$(cat "${patches[@]}" | sha256sum | cut -d' ' -f1)
	if [ "$(cat "$psrc/.msvm-patched" 2>/dev/null)" != "$stamp" ]; then
		rm -rf "$psrc"
		# Hard links share the unpatched files; the patched ones are copies.
		cp -al "$MSVM_KSRC" "$psrc"
		for f in mm/huge_memory.c mm/migrate_device.c include/linux/migrate.h; do
			cp --remove-destination "$MSVM_KSRC/$f" "$psrc/$f"
		done
		for p in "${patches[@]}"; do
			patch -d "$psrc" -p1 <"$p"
		done
		echo "$stamp" >"$psrc/.msvm-patched"
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
for r in zap_huge_pmd_repro migrate_device_anon_vma_repro; do
	msvm_stage "build-$r" gcc -static -O2 -Wall -pthread -o "$B/$r" \
		-I "$MSVM_KSRC" "$MSVM_TOP/tests/upstream/$r.c"
done

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
	cp "$B/zap_huge_pmd_repro" "$B/migrate_device_anon_vma_repro" "$root/msvm/bin/"
	(cd "$root" && find . | cpio -o -H newc --quiet) >"$2"
	rm -rf "$root"
}

run() { # NAME KDIR CMD REPRO
	local rc=0 log=$B/repro-$3-$1-console.log
	python3 "$MSVM_TOP/scripts/vm.py" --kernel "$2/arch/x86/boot/bzImage" \
		--initrd "$B/repro-$1.cpio" --gpus "" --mem 1G --cmd "$3" --quiet \
		--append "msvm_repro_secs=$SECS" --log "$log" \
		--timeout $((SECS + 240)) >"$B/repro-$3-$1.out" 2>&1 || rc=$?
	local line
	line=$(grep -ahoE "$4: (PASS|FAIL)[^[:cntrl:]]*" "$log" | tail -1)
	local splat
	splat=$(grep -ahoE 'kernel BUG at [^ ]+|BUG: [A-Za-z -]+ in [A-Za-z_0-9]+|BUG: [A-Za-z -]+|WARNING: CPU: [0-9]+ PID: [0-9]+ at [^ ]+' \
		"$log" | head -1)
	printf '%-8s guest exit %-3s %s\n' "$1" "$rc" "${splat:+$splat; }${line:-no verdict (the guest died or hung)}"
	[ "$rc" = 0 ] && [ -z "$splat" ] && [ -n "$line" ] && [[ $line == *PASS* ]]
}

initramfs "$stock" "$B/repro-stock.cpio"
initramfs "$pdir" "$B/repro-patched.cpio"
rc=0
for bug in "zap-repro zap_huge_pmd_repro zap_huge_pmd() (test_hmm 2 MiB folios + MADV_DONTNEED)" \
	"anon-vma-repro migrate_device_anon_vma_repro migrate_device_range() anon_vma (test_hmm eviction by frame + a process killed)"; do
	read -r cmd repro what <<<"$bug"
	echo
	echo "== $what, $SECS s each"
	stock_ok=0 patched_ok=0
	run stock "$stock" "$cmd" "$repro" && stock_ok=1
	run patched "$pdir" "$cmd" "$repro" && patched_ok=1
	if [ $stock_ok = 0 ] && [ $patched_ok = 1 ]; then
		echo "upstream-repro: $repro: the stock kernel fails, the patched one passes: as expected"
	else
		echo "upstream-repro: $repro: unexpected: stock $([ $stock_ok = 1 ] && echo passed || echo failed)," \
			"patched $([ $patched_ok = 1 ] && echo passed || echo failed)"
		rc=1
	fi
done
exit $rc
