#!/usr/bin/env bash
# Sets up everything msvm needs on a fresh Debian 12 machine, idempotently:
#   1. Debian packages (toolchain, QEMU, busybox),
#   2. bindgen-cli (cached),
#   3. the Linux kernel source (Debian package, private apt state),
#   4. QEMU with the vfio-user client (Debian 13's backport, in a private
#      root, for the msvm-gpu device model),
#   5. the guest kernel for the variant in $MSVM_VARIANT (release|debug),
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

# apt-get options for a private apt state under $MSVM_CACHE/apt-$1 with the
# sources in $2 (one "deb ..." line each, ';'-separated), no dpkg status: a
# download resolves every dependency, libc included.
private_apt() {
	local apt=$MSVM_CACHE/apt-$1
	mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/etc" "$apt/state"
	: >"$apt/state/status"
	tr ';' '\n' <<<"$2" >"$apt/etc/sources.list"
	APT_OPTS=(-o "Dir::Etc::SourceList=$apt/etc/sources.list" -o "Dir::Etc::SourceParts=-"
		-o "Dir::State=$apt/state" -o "Dir::State::Lists=$apt/lists" -o "Dir::State::status=$apt/state/status"
		-o "Dir::Cache=$apt" -o "Dir::Cache::archives=$apt/archives" -o "Dir::Log=$apt"
		-o "APT::Get::List-Cleanup=0" -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1"
		-o "APT::Architecture=amd64" -o "APT::Architectures::=amd64")
}

# QEMU 10.1 or newer (the vfio-user client): Debian 13's backport and
# every package it needs, down to libc, unpacked into $MSVM_QEMU_ROOT/root;
# $MSVM_QEMU is a wrapper that runs it with that root's loader and
# libraries and finds its firmware there.
stage_qemu() {
	local root=$MSVM_QEMU_ROOT
	if [ -x "$root/qemu-system-x86_64" ] && "$root/qemu-system-x86_64" -device vfio-user-pci,help >/dev/null 2>&1; then
		msvm_log "QEMU cached: $("$root/qemu-system-x86_64" --version | head -1)"
		return 0
	fi
	local k=/usr/share/keyrings/debian-archive-keyring.gpg
	private_apt qemu "deb [signed-by=$k] http://deb.debian.org/debian trixie main;deb [signed-by=$k] http://deb.debian.org/debian $MSVM_QEMU_SUITE main"
	apt-get "${APT_OPTS[@]}" update -q >/dev/null || msvm_die "cannot read the trixie package lists"
	rm -f "$MSVM_CACHE/apt-qemu/archives/"*.deb
	apt-get "${APT_OPTS[@]}" install -y -q --download-only --no-install-recommends \
		-t "$MSVM_QEMU_SUITE" qemu-system-x86 >/dev/null ||
		msvm_die "qemu-system-x86 is not available from $MSVM_QEMU_SUITE"
	rm -rf "$root.tmp"
	mkdir -p "$root.tmp/root"
	local d
	for d in "$MSVM_CACHE/apt-qemu/archives/"*.deb; do
		dpkg -x "$d" "$root.tmp/root"
	done
	cat >"$root.tmp/qemu-system-x86_64" <<'WRAP'
#!/bin/sh
# Debian 13's QEMU, run with the libraries of its own root (msvm's setup.sh).
R=$(dirname "$(readlink -f "$0")")/root
L=$R/usr/lib/x86_64-linux-gnu
QEMU_MODULE_DIR=$L/qemu exec "$R/usr/lib64/ld-linux-x86-64.so.2" --library-path "$L:$L/pulseaudio" \
	"$R/usr/bin/qemu-system-x86_64" -L "$R/usr/share/qemu" -L "$R/usr/share/seabios" "$@"
WRAP
	chmod +x "$root.tmp/qemu-system-x86_64"
	"$root.tmp/qemu-system-x86_64" -device vfio-user-pci,help >/dev/null ||
		msvm_die "the unpacked QEMU does not run, or has no vfio-user-pci"
	# Every library from the private root, none from the host's (whose
	# libc is older).
	local r=$root.tmp/root L=$root.tmp/root/usr/lib/x86_64-linux-gnu outside
	outside=$("$r/usr/lib64/ld-linux-x86-64.so.2" --library-path "$L:$L/pulseaudio" --list \
		"$r/usr/bin/qemu-system-x86_64" | grep -v "$r" | grep -vE 'linux-vdso|^\s*/lib64/ld-linux' || true)
	[ -z "$outside" ] || msvm_die "the unpacked QEMU needs libraries from outside its root: $outside"
	rm -rf "$root"
	mv "$root.tmp" "$root"
	rm -f "$MSVM_CACHE/apt-qemu/archives/"*.deb
	msvm_log "QEMU: $("$root/qemu-system-x86_64" --version | head -1)"
}

stage_source() {
	if [ -f "$MSVM_KSRC/Makefile" ]; then
		msvm_log "kernel source cached: $MSVM_KSRC"
		return 0
	fi
	private_apt ksrc "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $MSVM_KSRC_SUITE main"
	apt-get "${APT_OPTS[@]}" update -q >/dev/null ||
		msvm_die "cannot read the $MSVM_KSRC_SUITE package list"
	local dl=$MSVM_CACHE/dl
	rm -rf "$dl"
	mkdir -p "$dl"
	(cd "$dl" && apt-get "${APT_OPTS[@]}" download -q "$MSVM_KSRC_PKG" >/dev/null) ||
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
	msvm_stage qemu stage_qemu
	local v
	for v in "${variants[@]}"; do
		case $v in release | debug) ;; *) msvm_die "unknown variant '$v'" ;; esac
		msvm_stage "kernel-$v" stage_kernel "$v"
	done
	msvm_log "set-up complete in $(( $(date +%s) - t0 )) s"
}

main "$@"
