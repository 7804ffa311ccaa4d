#!/usr/bin/env bash
# Packs the guest initramfs: busybox, tests/guest/ (init and the guest
# commands), msvm.ko, the user-space binaries and, when built, test_hmm.ko,
# hmm-tests and the Level Zero driver with its loader. Usage:
# mkinitramfs.sh OUT.cpio
set -euo pipefail
source "$(dirname "$0")/lib.sh"

out=${1:?usage: mkinitramfs.sh OUT.cpio}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

mkdir -p "$root"/{bin,dev,proc,sys,tmp,msvm/bin,msvm/guest}
cp /bin/busybox "$root/bin/busybox"
file -L "$root/bin/busybox" 2>/dev/null | grep -q 'statically linked' ||
	ldd /bin/busybox 2>&1 | grep -q 'not a dynamic' || msvm_die "/bin/busybox is not static (install busybox-static)"
cp "$MSVM_TOP"/tests/guest/* "$root/msvm/guest/"
mv "$root/msvm/guest/init" "$root/init"
chmod +x "$root/init" "$root"/msvm/guest/*

[ -f "$MSVM_TOP/msvm.ko" ] || msvm_die "msvm.ko is not built"
cp "$MSVM_TOP/msvm.ko" "$root/msvm/"
[ -f "$MSVM_TOP/msvm_dmirror.ko" ] && cp "$MSVM_TOP/msvm_dmirror.ko" "$root/msvm/"
bins=$MSVM_TOP/tools/target/x86_64-unknown-linux-gnu/release
for b in msvm msvm-tests; do
	[ -x "$bins/$b" ] || msvm_die "$b is not built (make tools)"
	cp "$bins/$b" "$root/msvm/bin/"
done
hmm=$(find "$MSVM_KDIR/lib" -name test_hmm.ko 2>/dev/null | head -1)
[ -n "$hmm" ] && cp "$hmm" "$root/msvm/"
for b in hmm-tests hmm-bench msvm-example; do
	[ -x "$MSVM_TOP/build/$b" ] && cp "$MSVM_TOP/build/$b" "$root/msvm/bin/"
done
# Level Zero (build.sh ze): the driver, its tests and example are dynamic,
# with Debian's loader and validation layer (which the loader opens by
# name), the dynamic linker and every library they need.
ze=$MSVM_TOP/build/ze
if [ -x "$ze/ze-tests" ]; then
	lib=/usr/lib/x86_64-linux-gnu
	mkdir -p "$root/msvm/ze" "$root$lib" "$root/lib64"
	cp "$ze"/* "$root/msvm/ze/"
	cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
	for f in "$ze"/* "$lib/libze_loader.so.1" "$lib/libze_validation_layer.so.1"; do
		echo "$f"
		ldd "$f" | awk '/=> \// { print $3 }'
	done | sort -u | while read -r f; do
		case $f in "$ze"/*) continue ;; esac
		cp -L "$f" "$root$lib/"
	done
fi
(cd "$root" && find . | cpio -o -H newc --quiet) >"$out"
msvm_log "initramfs: $out ($(( $(stat -c %s "$out") >> 20 )) MiB)"
