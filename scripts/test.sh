#!/usr/bin/env bash
# The README's test command: sets everything up, then
#   1. host: the user-space workspaces (cargo test, clippy -D warnings, fmt;
#      tools/ and the Level Zero driver's tools/ze-msvm/),
#   2. host: the module's imports against design.rst's layer map
#      (scripts/import-graph.py --check), the module with rustfmt --check and
#      clippy (CLIPPY=1), no warnings,
#      and the build checks (scripts/build-check.sh): dkms builds msvm.ko
#      against the release kernel tree, and a tree without two options msvm
#      needs is refused before compiling, both named,
#   3. guest: boots three emulated GPUs (two behind a PCIe switch, one on its
#      own root port), loads msvm (its KUnit suites run), runs the integration
#      tests, unbind/re-bind, PCIe hot-unplug/re-plug and rmmod; then a
#      small-RAM boot, a boot whose last GPU's device process is killed
#      under a job, a swiotlb=force boot, three boots behind a virtual
#      IOMMU (intel-iommu, strict, lazy and passthrough), a boot whose GPUs
#      reach each other inside a switch and through the host bridge (a CPU
#      taken for an AMD Zen one: MSVM_KVM does not apply), a boot with generic devices
#      (NVMe controllers bound at run time) and the 8-GPU server (two NUMA
#      nodes, a host bridge each). Every GPU is an msvm-gpu device (device/,
#      one process each, attached over vfio-user, QEMU 11.1), but in the
#      generic-device boot, whose GPUs are ivshmem-plain BARs,
#   4. host: parses the guest's KTAP with the kernel's kunit.py.
# MSVM_GUEST_ARGS adds guest parameters, e.g. msvm_fuzz_calls=, msvm_fuzz_seed=,
# msvm_stress_secs= (make soak sets long ones).
# Guest timeouts: the main guest runs 8 to 10 minutes under TCG on a good
# boot, and a boot can be up to twice as slow: it gets 30 minutes, the others
# 15; MSVM_TEST_TIMEOUT sets one timeout for all eight.
# Any failure, or any kernel splat in the guest console (other than a known
# report of the kernel itself, see scripts/vm.py), fails the command.
set -euo pipefail
# The tests run on the debug kernel (KASAN, lockdep, kmemleak, DEBUG_VM, ...);
# MSVM_VARIANT=release runs them on the release kernel.
MSVM_VARIANT=${MSVM_VARIANT:-debug}
unset KDIR # for make module KDIR=...; the tests use the project's kernels
source "$(dirname "$0")/lib.sh"
export MSVM_VARIANT
t0=$(date +%s)
B=$MSVM_TOP/build
mkdir -p "$B"

# The build checks need the release kernel tree, whatever the tests run on.
if [ "$MSVM_VARIANT" = release ]; then
	"$MSVM_TOP/scripts/setup.sh" release
else
	"$MSVM_TOP/scripts/setup.sh" release "$MSVM_VARIANT"
fi

host_tests() {
	cd "$MSVM_TOP/tools"
	cargo fmt --check
	cargo clippy --release --locked --quiet -- -D warnings
	cargo test --release --locked 2>&1 | tee "$B/cargo-test.log" | grep -E '^test |test result' || true
	! grep -q 'test result: FAILED' "$B/cargo-test.log" && grep -q 'test result: ok' "$B/cargo-test.log"
	# The Level Zero driver: its own workspace (a cdylib), an empty
	# RUSTFLAGS (the tools' +crt-static forbids a cdylib); its loader tests
	# run the driver through Debian's loader.
	cd "$MSVM_TOP/tools/ze-msvm"
	cargo fmt --check
	RUSTFLAGS= cargo clippy --release --locked --quiet --all-targets -- -D warnings
	RUSTFLAGS= cargo test --release --locked 2>&1 | tee -a "$B/cargo-test.log" | grep -E '^test |test result' || true
	! grep -q 'test result: FAILED' "$B/cargo-test.log"
	# msvm-gpu, the device model: its own workspace, a host program. Its
	# exit status counts too (a test killed by a signal prints no
	# "test result").
	cd "$MSVM_TOP/device"
	cargo fmt --check
	cargo clippy --release --locked --quiet --all-targets -- -D warnings
	local rc=0
	cargo test --release --locked >"$B/cargo-test-device.log" 2>&1 || rc=$?
	cat "$B/cargo-test-device.log" >>"$B/cargo-test.log"
	grep -E '^test |test result' "$B/cargo-test-device.log" || true
	[ "$rc" = 0 ] || { tail -20 "$B/cargo-test-device.log"; return 1; }
	! grep -q 'test result: FAILED' "$B/cargo-test.log"
}
msvm_stage host-tests host_tests
msvm_stage import-graph python3 "$MSVM_TOP/scripts/import-graph.py" \
	--check "$MSVM_TOP/Documentation/design.rst" "$MSVM_TOP/src"
msvm_stage module-rustfmt "$MSVM_TOP/scripts/build.sh" rustfmtcheck
msvm_stage module-clippy "$MSVM_TOP/scripts/build.sh" clippy >/dev/null # also builds msvm.ko
msvm_stage tools "$MSVM_TOP/scripts/build.sh" tools
msvm_stage device "$MSVM_TOP/scripts/build.sh" device
msvm_stage c-example "$MSVM_TOP/scripts/build.sh" c-example
msvm_stage ze "$MSVM_TOP/scripts/build.sh" ze
build_rc=0
msvm_stage build-checks "$MSVM_TOP/scripts/build-check.sh" 2>&1 | tee "$B/build-check.log" || build_rc=$?
"$MSVM_TOP/scripts/mkinitramfs.sh" "$B/test-initramfs.cpio"

guest_rc=0
msvm_stage guest python3 "$MSVM_TOP/scripts/vm.py" --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
	--initrd "$B/test-initramfs.cpio" --gpus sw,sw,rp --cmd test \
	--append "${MSVM_GUEST_ARGS:-}" \
	--log "$B/test-console.log" --timeout "${MSVM_TEST_TIMEOUT:-1800}" || guest_rc=$?

# The small-RAM guest: four 1 GiB GPUs, 512 MiB of RAM, the shrinker under
# real memory pressure.
small_rc=0
msvm_stage guest-small-ram python3 "$MSVM_TOP/scripts/vm.py" --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
	--initrd "$B/test-initramfs.cpio" --gpus sw,sw,rp,rp --vram 1G --mem 512M --cmd lifecycle \
	--log "$B/test-small-console.log" --timeout "${MSVM_TEST_TIMEOUT:-900}" || small_rc=$?

# A device process killed under a job (msvm-tests device-lost): a guest of
# its own, four msvm-gpus.
lost_rc=0
lost_boot() {
	python3 "$MSVM_TOP/scripts/vm.py" --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
		--initrd "$B/test-initramfs.cpio" --gpus sw,sw,rp,rp --cmd device-lost \
		--log "$B/test-lost-console.log" --timeout "${MSVM_TEST_TIMEOUT:-900}"
}
msvm_stage guest-device-lost lost_boot || lost_rc=$?
# QEMU 11.1's vfio-user client can abort itself when a device process dies
# under it (an assertion in error_setv; testing.rst, device-lost): that boot
# proves nothing of msvm's, and runs again, up to three boots in all.
for again in 1 2; do
	if [ "$lost_rc" = 0 ] || ! grep -q "error_setv: Assertion" "$B/test-lost-console.log"; then
		break
	fi
	echo "QEMU aborted at the device process's death: the device-lost boot again ($again)"
	lost_rc=0
	msvm_stage "guest-device-lost-again-$again" lost_boot || lost_rc=$?
done

# Bounce buffers: the data-integrity tests with swiotlb=force (every DMA
# mapping bounces, as in SEV/TDX guests).
swiotlb_rc=0
msvm_stage guest-swiotlb python3 "$MSVM_TOP/scripts/vm.py" --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
	--initrd "$B/test-initramfs.cpio" --gpus sw,sw,rp --cmd integrity \
	--append "swiotlb=force,track_hiwater" \
	--log "$B/test-swiotlb-console.log" --timeout "${MSVM_TEST_TIMEOUT:-900}" || swiotlb_rc=$?

# Behind a virtual IOMMU (QEMU's intel-iommu): DMA addresses are IOVAs,
# which QEMU sends each msvm-gpu as DMA_MAPs (a peer inside the switch is
# reached at its bus address, which the switch routes); the integrity
# tests, the P2P paths, P2P jobs and copies, the fault buffer; strict
# invalidation, lazy (Linux forces strict under intel-iommu's caching
# mode, which the vfio-user client needs: the guest switches the GPUs'
# groups to DMA-FQ, testing.rst), then passthrough.
strict_rc=0
lazy_rc=0
pt_rc=0
iommu_boot() {
	python3 "$MSVM_TOP/scripts/vm.py" --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
		--initrd "$B/test-initramfs.cpio" --gpus sw,sw,rp --iommu intel --cmd iommu \
		--append "intel_iommu=on $1" \
		--log "$B/test-iommu-$2-console.log" --timeout "${MSVM_TEST_TIMEOUT:-900}"
}
msvm_stage guest-iommu-strict iommu_boot iommu.strict=1 strict || strict_rc=$?
msvm_stage guest-iommu-lazy iommu_boot iommu.strict=0 lazy || lazy_rc=$?
msvm_stage guest-iommu-pt iommu_boot iommu=pt pt || pt_rc=$?

# The P2P paths pci_p2pdma decides, each taken, data checked: a CPU Linux
# takes for an AMD Zen one (its host bridges pass P2P) and a strict
# virtual IOMMU: inside the switch by bus address (which the switch
# routes, no IOMMU), and through the host bridge to the GPU on its own
# root port (its BAR mapped through the IOMMU).
paths_rc=0
msvm_stage guest-paths env MSVM_KVM=0 python3 "$MSVM_TOP/scripts/vm.py" --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
	--initrd "$B/test-initramfs.cpio" --gpus sw,sw,rp --iommu intel --cpu zen --cmd paths \
	--append "intel_iommu=on iommu.strict=1" \
	--log "$B/test-paths-console.log" --timeout "${MSVM_TEST_TIMEOUT:-900}" || paths_rc=$?

# Generic devices: QEMU NVMe controllers (no nvme driver in the guest)
# bound at run time (generic_id=, driver_override), one with a 64 MiB
# controller memory buffer used as a GPU by the core tests, two refused.
generic_rc=0
msvm_stage guest-generic python3 "$MSVM_TOP/scripts/vm.py" --device ivshmem --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
	--initrd "$B/test-initramfs.cpio" --gpus nvme:sw:64,sw,rp,nvme:rp:16,nvme:rp:0 --cmd generic \
	--log "$B/test-generic-console.log" --timeout "${MSVM_TEST_TIMEOUT:-900}" || generic_rc=$?

# The 8-GPU server: two NUMA nodes, each with its own host bridge (a
# pxb-pcie), a switch of three GPUs and one GPU on its own root port; the
# P2P matrix, the owner groups, jobs across the bridges, a hot-unplug.
# Its guest has a server's 46 physical address bits (vm.py's
# Topology.phys_bits: with 40, QEMU 11.1's firmware and ACPI tables leave
# no free physical range for a device-private pagemap).
eight_rc=0
msvm_stage guest-8gpu python3 "$MSVM_TOP/scripts/vm.py" --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
	--initrd "$B/test-initramfs.cpio" --gpus 8gpu --cmd topology8 \
	--log "$B/test-8gpu-console.log" --timeout "${MSVM_TEST_TIMEOUT:-900}" || eight_rc=$?

echo
echo "== KUnit (parsed by the kernel's tools/testing/kunit/kunit.py)"
kunit_rc=0
# msvm's suites run when the module loads: their KTAP document starts at the
# first top-level "KTAP version" line after the guest's insmod marker.
awk '/^== msvm: insmod/ { armed = 1 }
	armed && /^\[ *[0-9.]+\] KTAP version/ { on = 1 }
	/^== msvm-tests/ { on = 0; armed = 0 }
	on' "$B/test-console.log" >"$B/kunit-ktap.log"
python3 "$MSVM_KSRC/tools/testing/kunit/kunit.py" parse "$B/kunit-ktap.log" \
	>"$B/kunit.log" 2>&1 || kunit_rc=$?
sed 's/\x1b\[[0-9;]*m//g' "$B/kunit.log" | grep -vE '^\[..:..:..\] *$' | tail -20
for suite in msvm_device msvm_dmem msvm_topology msvm_uapi msvm_placement msvm_vram msvm_freemap msvm_lru msvm_thrash msvm_access msvm_block_key msvm_process msvm_numa msvm_engine msvm_devpt msvm_tlb msvm_shadow msvm_pagemap msvm_backing msvm_mmap msvm_cancel msvm_migrate msvm_hmm msvm_exclusive msvm_misc; do
	grep -q "# Subtest: $suite" "$B/test-console.log" || {
		echo "KUnit suite $suite did not run"
		kunit_rc=1
	}
done
kunit_pass=$(sed -nE 's/.*Ran [0-9]+ tests?:.* passed: ([0-9]+).*/\1/p' "$B/kunit.log" | tail -1)
kunit_fail=$(sed -nE 's/.*Ran [0-9]+ tests?:.* failed: ([0-9]+).*/\1/p' "$B/kunit.log" | tail -1)
kunit_pass=${kunit_pass:-0}
kunit_fail=${kunit_fail:-0}

read -r it_pass it_fail < <(grep -hoE 'msvm-tests: [0-9]+ passed, [0-9]+ failed' \
	"$B/test-console.log" "$B/test-small-console.log" "$B/test-lost-console.log" "$B/test-swiotlb-console.log" \
	"$B/test-iommu-strict-console.log" "$B/test-iommu-lazy-console.log" "$B/test-iommu-pt-console.log" \
	"$B/test-paths-console.log" \
	"$B/test-generic-console.log" "$B/test-8gpu-console.log" |
	awk '{p += $2; f += $4} END {print p + 0, f + 0}')
host_pass=$(grep -hoE 'test result: [a-zA-Z]+\. [0-9]+ passed' "$B/cargo-test.log" | awk '{s += $4} END {print s + 0}')
host_fail=$(grep -hoE '; [0-9]+ failed' "$B/cargo-test.log" | awk '{s += $2} END {print s + 0}')
read -r build_pass build_fail < <(grep -hoE 'msvm-build: [0-9]+ passed, [0-9]+ failed' "$B/build-check.log" |
	awk '{p += $2; f += $4} END {print p + 0, f + 0}')

echo
echo "== summary (kernel: $MSVM_VARIANT, $(( $(date +%s) - t0 )) s)"
echo "host cargo tests:     $host_pass passed, $host_fail failed"
echo "build checks:         $build_pass passed, $build_fail failed (exit $build_rc)"
echo "KUnit cases:          $kunit_pass passed, $kunit_fail failed (kunit.py exit $kunit_rc)"
echo "guest integration:    $it_pass passed, $it_fail failed (guest exit $guest_rc, small-RAM guest exit $small_rc, device-lost guest exit $lost_rc, swiotlb guest exit $swiotlb_rc, IOMMU strict guest exit $strict_rc, IOMMU lazy guest exit $lazy_rc, IOMMU passthrough guest exit $pt_rc, P2P paths guest exit $paths_rc, generic-device guest exit $generic_rc, 8-GPU guest exit $eight_rc)"
# A guest that failed: where it was (its last section) and its last line,
# so that the summary says it.
guest_where() {
	[ "$2" = 0 ] && return
	echo "  $1 guest (exit $2) was in: $(grep -aE '^== ' "$3" 2>/dev/null | tail -1)"
	echo "  its last console line: $(grep -av '^[[:space:]]*$' "$3" 2>/dev/null | tail -1 | cut -c1-200)"
}
guest_where main "$guest_rc" "$B/test-console.log"
guest_where small-RAM "$small_rc" "$B/test-small-console.log"
guest_where device-lost "$lost_rc" "$B/test-lost-console.log"
guest_where swiotlb "$swiotlb_rc" "$B/test-swiotlb-console.log"
guest_where "IOMMU strict" "$strict_rc" "$B/test-iommu-strict-console.log"
guest_where "IOMMU lazy" "$lazy_rc" "$B/test-iommu-lazy-console.log"
guest_where "IOMMU passthrough" "$pt_rc" "$B/test-iommu-pt-console.log"
guest_where "P2P paths" "$paths_rc" "$B/test-paths-console.log"
guest_where generic-device "$generic_rc" "$B/test-generic-console.log"
guest_where 8-GPU "$eight_rc" "$B/test-8gpu-console.log"
fail=$(( host_fail + build_fail + kunit_fail + it_fail ))
if [ "$guest_rc" != 0 ] || [ "$small_rc" != 0 ] || [ "$lost_rc" != 0 ] || [ "$swiotlb_rc" != 0 ] || [ "$generic_rc" != 0 ] ||
	[ "$strict_rc" != 0 ] || [ "$lazy_rc" != 0 ] || [ "$pt_rc" != 0 ] || [ "$paths_rc" != 0 ] ||
	[ "$eight_rc" != 0 ] || [ "$kunit_rc" != 0 ]; then
	fail=$(( fail + 1 ))
fi
# A build-check run that failed without a failed check (or printed no count).
if [ "$build_rc" != 0 ] && [ "$build_fail" = 0 ]; then
	fail=$(( fail + 1 ))
fi
[ "$it_pass" -gt 0 ] || fail=$(( fail + 1 ))
[ "$build_pass" -gt 0 ] || fail=$(( fail + 1 ))
echo "total: $(( host_pass + build_pass + kunit_pass + it_pass )) passed, $fail failed"
[ "$fail" = 0 ]
