#!/usr/bin/env bash
# Sets up everything msvm needs on a fresh Debian 12 machine, idempotently:
#   1. Debian packages (toolchain, QEMU, busybox),
#   2. bindgen-cli (cached),
#   3. the Linux kernel source (Debian package, private apt state),
#   4. the guest kernel for the variant in $MSVM_VARIANT (release|debug),
#      built out of tree in the cache and rebuilt incrementally.
# Usage: scripts/setup.sh [release|debug]...   (default: $MSVM_VARIANT)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

PKGS=(rustc-web rust-web-src clang-22 lld-22 llvm-22 libclang-22-dev flex bison bc
	libelf-dev libssl-dev cpio busybox-static qemu-system-x86 python3 make gcc libc6-dev
	xz-utils libdrm-dev rust-web-clippy rsync file python3-matplotlib dkms libze1 libze-dev)

stage_packages() {
	local missing=() p
	for p in "${PKGS[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$p")
	done
	if [ ${#missing[@]} -eq 0 ]; then
		msvm_log "all ${#PKGS[@]} Debian packages present"
		return 0
	fi
	msvm_log "installing: ${missing[*]}"
	[ "$(id -u)" = 0 ] || msvm_die "need root to install packages: ${missing[*]}"
	apt-get update -q >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		"${missing[@]}" >/dev/null || msvm_die "apt-get install failed for: ${missing[*]}"
}

stage_bindgen() {
	if [ -x "$MSVM_BINDGEN" ] &&
		"$MSVM_BINDGEN" --version 2>/dev/null | grep -q "$MSVM_BINDGEN_VER"; then
		msvm_log "bindgen $MSVM_BINDGEN_VER cached"
		return 0
	fi
	command -v cargo >/dev/null || msvm_die "cargo not found (needed to build bindgen-cli)"
	cargo install --locked --quiet bindgen-cli --version "$MSVM_BINDGEN_VER" \
		--root "$MSVM_CACHE/bindgen-$MSVM_BINDGEN_VER"
}

stage_source() {
	if [ -f "$MSVM_KSRC/Makefile" ]; then
		msvm_log "kernel source cached: $MSVM_KSRC"
		return 0
	fi
	local apt=$MSVM_CACHE/apt
	mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/etc"
	cat >"$apt/etc/sources.list" <<SRC
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $MSVM_KSRC_SUITE main
SRC
	local opts=(-o "Dir::Etc::SourceList=$apt/etc/sources.list" -o "Dir::Etc::SourceParts=-"
		-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt" -o "Dir::Cache::archives=$apt/archives"
		-o "APT::Get::List-Cleanup=0" -o "APT::Sandbox::User=root")
	apt-get "${opts[@]}" update -q >/dev/null ||
		msvm_die "cannot read the $MSVM_KSRC_SUITE package list"
	local dl=$MSVM_CACHE/dl
	rm -rf "$dl"
	mkdir -p "$dl"
	(cd "$dl" && apt-get "${opts[@]}" download -q "$MSVM_KSRC_PKG" >/dev/null) ||
		msvm_die "package $MSVM_KSRC_PKG is not available from $MSVM_KSRC_SUITE"
	dpkg -x "$dl"/"$MSVM_KSRC_PKG"_*.deb "$dl/x"
	local tarball
	tarball=$(ls "$dl"/x/usr/src/"$MSVM_KSRC_PKG".tar.*)
	msvm_log "unpacking $(basename "$tarball")"
	rm -rf "$MSVM_KSRC.tmp"
	mkdir -p "$MSVM_KSRC.tmp"
	tar -xf "$tarball" -C "$MSVM_KSRC.tmp" --strip-components=1
	mv "$MSVM_KSRC.tmp" "$MSVM_KSRC"
	rm -rf "$dl"
}

# What msvm.ko needs on any kernel, and what the tests need besides: every
# symbol of both must be in the final .config of the project's kernels.
MSVM_KCONFIG_LISTS=("$MSVM_TOP/scripts/kconfig/module" "$MSVM_TOP/scripts/kconfig/required")

fragments_for() {
	echo "$MSVM_TOP/scripts/kconfig/msvm.config"
	[ "$1" = debug ] && echo "$MSVM_TOP/scripts/kconfig/debug.config"
	return 0
}

# Fails loudly if a wanted symbol was dropped by olddefconfig.
verify_config() {
	local kdir=$1 bad=0 line sym val
	shift
	while read -r line; do
		case $line in CONFIG_*=*) ;; *) continue ;; esac
		sym=${line%%=*}
		val=${line#*=}
		if ! grep -qx "$sym=$val" "$kdir/.config"; then
			msvm_log "config: wanted $sym=$val, got: $(grep -E "^(# )?$sym[= ]" "$kdir/.config" || echo unset)"
			bad=1
		fi
	done < <(cat "$@")
	[ $bad = 0 ] || msvm_die "kernel config is missing required symbols (see above)"
}

stage_kernel() {
	local variant=$1 kdir=$MSVM_CACHE/build-$1 frags stamp
	mapfile -t frags < <(fragments_for "$variant")
	mkdir -p "$kdir"
	stamp=$( (cat "${frags[@]}" "${MSVM_KCONFIG_LISTS[@]}"; "$MSVM_RUSTC" --version; "${MSVM_LLVM}clang" --version | head -1;
		echo "$MSVM_KVER_MAJOR") | sha256sum | cut -c1-16)
	if [ -f "$kdir/.msvm-stamp" ] && [ "$(cat "$kdir/.msvm-stamp")" = "$stamp" ] &&
		[ -f "$kdir/arch/x86/boot/bzImage" ]; then
		msvm_log "kernel '$variant' up to date: $kdir"
		return 0
	fi
	local mk=(make -C "$MSVM_KSRC" O="$kdir" $(msvm_kmake_args))
	"${mk[@]}" -s rustavailable || msvm_die "Rust toolchain not usable by the kernel"
	"${mk[@]}" -s tinyconfig >/dev/null
	"$MSVM_KSRC/scripts/kconfig/merge_config.sh" -m -O "$kdir" "$kdir/.config" "${frags[@]}" >/dev/null
	"${mk[@]}" -s olddefconfig
	verify_config "$kdir" "${frags[@]}" "${MSVM_KCONFIG_LISTS[@]}"
	msvm_log "building kernel '$variant' in $kdir (log: $kdir/build.log); a cold build takes ~20 min on 2 cores"
	local jobs
	jobs=$(nproc)
	( while sleep 60; do
		msvm_log "  ... $(grep -cE '^\s+(CC|RUSTC|LD|AR|AS)' "$kdir/build.log" 2>/dev/null) objects so far"
	done ) &
	local ticker=$!
	local rc=0
	"${mk[@]}" -j"$jobs" all >"$kdir/build.log" 2>&1 || rc=$?
	kill $ticker 2>/dev/null || true
	if [ $rc != 0 ]; then
		tail -40 "$kdir/build.log" >&2
		msvm_die "kernel build failed (full log: $kdir/build.log)"
	fi
	"${mk[@]}" -s headers_install >/dev/null
	echo "$stamp" >"$kdir/.msvm-stamp"
}

main() {
	local variants=("$@")
	[ ${#variants[@]} -gt 0 ] || variants=("$MSVM_VARIANT")
	mkdir -p "$MSVM_CACHE"
	local t0
	t0=$(date +%s)
	msvm_stage packages stage_packages
	msvm_stage bindgen stage_bindgen
	msvm_stage source stage_source
	local v
	for v in "${variants[@]}"; do
		case $v in release | debug) ;; *) msvm_die "unknown variant '$v'" ;; esac
		msvm_stage "kernel-$v" stage_kernel "$v"
	done
	msvm_log "set-up complete in $(( $(date +%s) - t0 )) s"
}

main "$@"
