#!/usr/bin/env bash
# make test's build checks: msvm.ko on a kernel of one's own (README,
# "Install on your own kernel"), against the project's release kernel tree,
# in build/dkms/ only (the work tree's own msvm.ko, /var/lib/dkms and
# /usr/src are left alone):
#   1. dkms.conf's PACKAGE_VERSION follows the uAPI version;
#   2. a copy of the source without build products, as a DKMS source tree;
#   3. a tree configured without CONFIG_DEVICE_PRIVATE and CONFIG_HMM_MIRROR
#      (a config-only tree): `make module KDIR=` fails before compiling and
#      names exactly those two options, and so does `dkms build` (its
#      make.log);
#   4. `dkms add` and `dkms build` (Debian's dkms, private --dkmstree and
#      --sourcetree, --kernelsourcedir) against the release tree: that is
#      `make module KDIR=<release tree>` through dkms.conf; msvm.ko's
#      vermagic is the tree's release and dkms reports it built;
#   5. nothing outside build/dkms changed.
# Prints "msvm-build: N passed, M failed" and fails if any check failed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
unset KDIR

B=$MSVM_TOP/build/dkms
REL=$MSVM_CACHE/build-release
pass=0
fail=0
ok() {
	echo "ok: $*"
	pass=$((pass + 1))
}
bad() {
	echo "FAIL: $*"
	fail=$((fail + 1))
}
finish() {
	echo "msvm-build: $pass passed, $fail failed"
	exit $((fail > 0))
}
# A step that breaks (rather than a check that fails) still counts.
trap 'bad "line $LINENO: unexpected failure"; finish' ERR

if [ ! -s "$REL/Module.symvers" ] || [ ! -s "$REL/include/config/kernel.release" ]; then
	bad "no built release kernel in $REL (scripts/setup.sh release)"
	finish
fi
krel=$(cat "$REL/include/config/kernel.release")
arch=$(uname -m)

# What must not change: the system's DKMS state and the work tree's own
# build of the module (the guest stages load it).
outside() {
	find /var/lib/dkms /usr/src -maxdepth 2 -printf '%p %T@\n' 2>/dev/null | sort
	find "$MSVM_TOP" -maxdepth 1 \( -name '*.ko' -o -name '*.o' -o -name Module.symvers \) \
		-printf '%p %T@\n' | sort
}
before=$(outside)

# 1. The DKMS version.
ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"$/\1/p' "$MSVM_TOP/dkms.conf")
uapi=$(sed -n 's/^#define MSVM_UAPI_VERSION \([0-9]*\)$/\1/p' "$MSVM_TOP/include/uapi/drm/msvm_drm.h")
if [ -n "$ver" ] && [ -n "$uapi" ] && [ "$ver" = "0.$uapi" ]; then
	ok "dkms.conf: PACKAGE_VERSION $ver follows MSVM_UAPI_VERSION $uapi"
else
	bad "dkms.conf: PACKAGE_VERSION '$ver' should be 0.$uapi (MSVM_UAPI_VERSION of msvm_drm.h): change it in dkms.conf"
	ver=${ver:-0.0}
fi

# 2. The DKMS source tree: what git tracks or would (.gitignore'd build
# products, build/ and tools/target/ left out).
rm -rf "$B"
src=$B/src/msvm-$ver
mkdir -p "$src" "$B/tree"
rsync -a --filter=':- .gitignore' --exclude=.git "$MSVM_TOP/" "$src/"
junk=$(cd "$src" && find . \( -name '*.o' -o -name '*.ko' -o -name '*.cmd' -o -path ./build \
	-o -path ./tools/target -o -name bindings_generated.rs \) -print | head -5) || junk="find failed"
if [ -f "$src/dkms.conf" ] && [ -f "$src/Kbuild" ] && [ -z "$junk" ]; then
	ok "source tree for dkms: $(find "$src" -type f | wc -l) files, no build products"
else
	bad "source tree for dkms in $src: dkms.conf or Kbuild missing, or build products: $junk"
fi

# dkms signs modules if it finds a sign-file, generating a key in
# /var/lib/dkms first: not here.
export sign_file=$B/no-sign-file
dkms_() { dkms "$@" -m msvm -v "$ver" --dkmstree "$B/tree" --sourcetree "$B/src"; }

if out=$(dkms_ add 2>&1); then
	ok "dkms add (private trees)"
else
	bad "dkms add: $out"
fi

# 3. A tree without two options msvm needs: the release tree's .config
# without them, its kernel.release, nothing else.
miss=$B/kdir-missing
mkdir -p "$miss/include/config"
cp "$REL/include/config/kernel.release" "$miss/include/config/"
sed -e '/^CONFIG_DEVICE_PRIVATE=/d' -e '/^CONFIG_HMM_MIRROR=/d' "$REL/.config" >"$miss/.config"
want="CONFIG_DEVICE_PRIVATE=y CONFIG_HMM_MIRROR=y"
# The options a message names as missing, sorted, on one line.
named() {
	grep -h 'is missing kernel options:' "$@" 2>/dev/null | grep -oE 'CONFIG_[A-Z0-9_]+=[ym]' |
		sort -u | xargs || true
}
if [ "$(diff "$REL/.config" "$miss/.config" | grep -c '^<')" != 2 ]; then
	bad "the release tree's .config lacks CONFIG_DEVICE_PRIVATE=y or CONFIG_HMM_MIRROR=y: no config-only tree to test with"
else
	rc=0
	make -C "$src" module KDIR="$miss" >"$B/missing.log" 2>&1 || rc=$?
	sed 's/^/   | /' "$B/missing.log"
	got=$(named "$B/missing.log")
	compiled=$(grep -cE '^ +(CC|RUSTC|BINDGEN|LD|AR) ' "$B/missing.log" || true)
	objs=$(find "$src" -name '*.o' | wc -l)
	if [ "$rc" != 0 ] && [ "$got" = "$want" ] && [ "$compiled" = 0 ] && [ "$objs" = 0 ]; then
		ok "make module KDIR=<tree without DEVICE_PRIVATE, HMM_MIRROR> fails before compiling, naming both"
	else
		bad "make module KDIR=$miss: exit $rc (want non-zero), named '$got' (want '$want'), $compiled compile lines and $objs objects (want 0)"
	fi
	rc=0
	dkms_ build -k "$krel" --kernelsourcedir "$miss" >"$B/dkms-missing.log" 2>&1 || rc=$?
	got=$(named "$B/tree/msvm/$ver/build/make.log")
	if [ "$rc" != 0 ] && [ "$got" = "$want" ]; then
		ok "dkms build against that tree fails, its make.log naming both options"
	else
		bad "dkms build against $miss: exit $rc (want non-zero), make.log named '$got' (want '$want')"
		cat "$B/dkms-missing.log"
	fi
fi

# 4. dkms build against the release tree: make module KDIR=<release tree>.
t0=$(date +%s)
rc=0
dkms_ build -k "$krel" --kernelsourcedir "$REL" >"$B/dkms-build.log" 2>&1 || rc=$?
secs=$(($(date +%s) - t0))
ko=$(find "$B/tree/msvm/$ver/$krel/$arch/module" -name 'msvm.ko*' 2>/dev/null | head -1) || ko=
# The build went through make module KDIR=<tree> (the checker's line).
via=$(grep -c "^msvm: building against $REL: " "$B/tree/msvm/$ver/$krel/$arch/log/make.log" 2>/dev/null || true)
if [ "$rc" = 0 ] && [ -n "$ko" ] && [ "$via" = 1 ]; then
	ok "dkms build -k $krel --kernelsourcedir $REL: $(basename "$ko") in $secs s"
else
	bad "dkms build against $REL: exit $rc, module '${ko:-none}', $via checks of $REL in make.log (want 1)"
	cat "$B/dkms-build.log"
	tail -40 "$B/tree/msvm/$ver/build/make.log" 2>/dev/null || true
fi
vermagic=$( [ -z "$ko" ] || modinfo -F vermagic "$ko" 2>/dev/null) || vermagic=
if [ "${vermagic%% *}" = "$krel" ]; then
	ok "modinfo: vermagic '$vermagic', the release tree's $krel"
else
	bad "modinfo ${ko:-msvm.ko}: vermagic '$vermagic', want $krel first"
fi
status=$(dkms status -m msvm -v "$ver" -k "$krel" --dkmstree "$B/tree" --sourcetree "$B/src" 2>&1 || true)
if echo "$status" | grep -qE "^msvm/$ver, $krel, $arch: built$"; then
	ok "dkms status: $status"
else
	bad "dkms status: '$status', want msvm/$ver, $krel, $arch: built"
fi

# 5. Nothing else touched.
after=$(outside)
if [ "$before" = "$after" ]; then
	ok "/var/lib/dkms, /usr/src and the work tree's msvm.ko untouched"
else
	bad "changed outside build/dkms: $(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | head -5 | xargs)"
fi
finish
