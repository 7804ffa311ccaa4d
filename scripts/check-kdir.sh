#!/usr/bin/env bash
# Checks that KDIR is a kernel build tree msvm.ko can be built against,
# before anything is compiled (scripts/build.sh runs it; so do make module
# KDIR=... and dkms):
#   - a configured tree (.config) with every option of scripts/kconfig/module,
#     all missing ones named in one message;
#   - Linux 7.3;
#   - built for modules: Module.symvers, and the Rust artifacts that
#     out-of-tree Rust modules compile against (rust/*.rmeta, the proc-macro
#     libraries, scripts/target.json);
#   - the toolchain: the rustc it was built with (CONFIG_RUSTC_VERSION_TEXT),
#     its C compiler, a bindgen.
# The toolchain is the one scripts/build.sh would use (msvm_use_kdir in
# lib.sh; RUSTC, BINDGEN, LLVM override it). Prints every problem and exits
# 1 if there is any; prints one line and exits 0 if there is none.
# Usage: scripts/check-kdir.sh KDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"

if [ $# != 1 ] || [ -z "$1" ]; then
	msvm_die "usage: $0 KDIR"
fi
kdir=$(realpath -m -- "$1")
[ -d "$kdir" ] || { echo "msvm: $kdir: no such directory" >&2; exit 1; }
cfg=$kdir/.config
[ -f "$cfg" ] || {
	echo "msvm: $kdir is not a configured kernel tree (no .config); KDIR must be a kernel build tree, e.g. /lib/modules/\$(uname -r)/build" >&2
	exit 1
}
msvm_use_kdir "$kdir"

problems=()
problem() { problems+=("msvm: $kdir $*"); }
# The value of a symbol in the tree's .config ("" if unset).
kval() { sed -n "s/^$1=//p" "$cfg" | tail -1; }
unquote() { local v=${1#\"}; echo "${v%\"}"; }

# 1. Options: all missing ones in one message.
missing=()
hints=()
while read -r line; do
	case $line in CONFIG_*=*) ;; *) continue ;; esac
	sym=${line%%=*}
	want=${line#*=}
	have=$(kval "$sym")
	[ "$have" != "$want" ] || continue
	if [ -n "$have" ]; then
		missing+=("$sym=$want (not $have)")
	else
		missing+=("$sym=$want")
	fi
	case $sym=$have in
	CONFIG_DRM=m) hints+=("CONFIG_DRM must be built in: Rust's kernel::drm exists only with DRM=y") ;;
	CONFIG_HMM_MIRROR=*) hints+=("CONFIG_HMM_MIRROR has no prompt: a driver that selects it brings it, e.g. CONFIG_TEST_HMM=m") ;;
	CONFIG_MMU_NOTIFIER=*) hints+=("CONFIG_MMU_NOTIFIER has no prompt: CONFIG_HMM_MIRROR selects it") ;;
	CONFIG_MIGRATION=*) hints+=("CONFIG_MIGRATION has no prompt: CONFIG_MEMORY_HOTREMOVE (which ZONE_DEVICE needs) or CONFIG_COMPACTION selects it") ;;
	CONFIG_ZONE_DEVICE=*) hints+=("CONFIG_ZONE_DEVICE depends on CONFIG_MEMORY_HOTREMOVE") ;;
	CONFIG_RUST=*) hints+=("CONFIG_RUST needs a Rust toolchain the kernel accepts when it is configured ('make rustavailable' in that tree)") ;;
	esac
done <"$MSVM_TOP/scripts/kconfig/module"
if [ ${#missing[@]} -gt 0 ]; then
	problem "is missing kernel options: ${missing[*]}; enable them and rebuild that kernel"
	for h in "${hints[@]}"; do
		problems+=("    ($h)")
	done
fi

# 2. The kernel version: 7.3, 7.3.N, 7.3-rcN, 7.3.N-flavour, ...
release_re="^${MSVM_KVER_MAJOR//./\\.}([.+-]|\$)"
rel=
if [ -s "$kdir/include/config/kernel.release" ]; then
	rel=$(head -1 "$kdir/include/config/kernel.release")
elif [ -f "$kdir/Makefile" ]; then
	rel=$(make -s -C "$kdir" kernelrelease 2>/dev/null | tail -1) || rel=
fi
if [ -z "$rel" ]; then
	problem "has no kernel release (no include/config/kernel.release): it is not prepared for modules"
elif ! [[ $rel =~ $release_re ]]; then
	problem "is Linux $rel; msvm needs Linux $MSVM_KVER_MAJOR"
fi

# 3. Built for modules, Rust artifacts included.
[ -s "$kdir/Module.symvers" ] ||
	problem "is not built: no Module.symvers (run make in it; a headers package ships Module.symvers)"
rust=$(kval CONFIG_RUST)
if [ "$rust" = y ]; then
	absent=()
	for f in rust/libcore.rmeta rust/libcompiler_builtins.rmeta rust/libffi.rmeta \
		rust/libbindings.rmeta rust/libuapi.rmeta rust/libbuild_error.rmeta \
		rust/libpin_init.rmeta rust/libzerocopy.rmeta rust/libkernel.rmeta \
		rust/libmacros.so rust/libpin_init_internal.so rust/libzerocopy_derive.so \
		scripts/target.json; do
		[ -s "$kdir/$f" ] || absent+=("$f")
	done
	[ ${#absent[@]} = 0 ] ||
		problem "lacks the Rust artifacts out-of-tree Rust modules are built against: ${absent[*]} (a full build of a CONFIG_RUST=y tree makes them; a headers package must ship them)"
fi

# 4. The toolchain.
rustc_have=
if [ "$rust" = y ]; then
	rustc_want=$(unquote "$(kval CONFIG_RUSTC_VERSION_TEXT)")
	rustc_have=$("$MSVM_RUSTC" --version 2>/dev/null) || rustc_have=
	if [ -z "$rustc_have" ]; then
		problem "was built with '$rustc_want', and there is no rustc here ($MSVM_RUSTC): install that one, or point RUSTC= to it"
	elif [ -n "$rustc_want" ] && [ "$rustc_have" != "$rustc_want" ]; then
		problem "was built with '$rustc_want', but the rustc here ($MSVM_RUSTC) is '$rustc_have': Rust modules need the very same rustc (point RUSTC= to it)"
	elif [ -z "$rustc_want" ]; then
		# No version text: compare CONFIG_RUSTC_VERSION (MAJOR*10000+MINOR*100+PATCH).
		num=$(echo "$rustc_have" | sed -nE 's/^rustc ([0-9]+)\.([0-9]+)\.([0-9]+).*/\1 \2 \3/p' |
			awk '{ print $1 * 10000 + $2 * 100 + $3 }')
		[ "$num" = "$(kval CONFIG_RUSTC_VERSION)" ] ||
			problem "was built with rustc version $(kval CONFIG_RUSTC_VERSION) (CONFIG_RUSTC_VERSION), but the rustc here ($MSVM_RUSTC) is '$rustc_have' (point RUSTC= to the same one)"
	fi
	bindgen_want=$(unquote "$(kval CONFIG_BINDGEN_VERSION_TEXT)")
	bindgen_have=$("$MSVM_BINDGEN" --version 2>/dev/null | head -1) || bindgen_have=
	if [ -z "$bindgen_have" ]; then
		problem "needs a bindgen for msvm's own bindings, and there is none ($MSVM_BINDGEN): install bindgen-cli (the kernel was built with '${bindgen_want:-?}'), or point BINDGEN= to it"
	elif [ -n "$bindgen_want" ] && [ "$bindgen_have" != "$bindgen_want" ]; then
		echo "msvm: note: $kdir was built with '$bindgen_want'; msvm's bindings will be made by '$bindgen_have' ($MSVM_BINDGEN)" >&2
	fi
fi
if [ "$(kval CONFIG_CC_IS_CLANG)" = y ]; then
	case $MSVM_LLVM in
	*/) cc=${MSVM_LLVM}clang ;;
	-*) cc=clang$MSVM_LLVM ;;
	*) cc=clang ;;
	esac
	command -v "$cc" >/dev/null ||
		problem "was built with clang ($(unquote "$(kval CONFIG_CC_VERSION_TEXT)")), and there is no $cc here: install it, or set LLVM= as for that kernel's make"
else
	cc=${CROSS_COMPILE:-}gcc
	command -v "$cc" >/dev/null ||
		problem "was built with $(unquote "$(kval CONFIG_CC_VERSION_TEXT)"), and there is no $cc here"
fi

if [ ${#problems[@]} -gt 0 ]; then
	printf '%s\n' "${problems[@]}" >&2
	echo "msvm: cannot build msvm.ko against $kdir (see above); nothing was compiled" >&2
	exit 1
fi
echo "msvm: building against $kdir: Linux $rel, $cc, $rustc_have"
