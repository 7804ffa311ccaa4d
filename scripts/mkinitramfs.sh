#!/usr/bin/env bash
# Packs the guest initramfs: busybox, tests/guest/ (init and the guest
# commands), msvm.ko, the user-space binaries and, when built, test_hmm.ko and
# hmm-tests. Usage: mkinitramfs.sh OUT.cpio
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
(cd "$root" && find . | cpio -o -H newc --quiet) >"$out"
msvm_log "initramfs: $out ($(( $(stat -c %s "$out") >> 20 )) MiB)"
