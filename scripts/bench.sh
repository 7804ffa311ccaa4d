#!/usr/bin/env bash
# The README's bench command: msvm against the kernel's test_hmm, its own copy
# floor and a guest memcpy, side by side in one boot of the release kernel,
# then again in a second, deterministic boot (QEMU -icount: figures labelled
# ".icount"), the placement workloads in a third boot with 256 MiB GPUs,
# and the scale costs on the 8-GPU server in a fourth;
# tables of GiB/s, ratios, phase splits, latencies and placement, every
# figure as a "BENCH <name> <value> <unit>" line, and build/bench.svg.
set -euo pipefail
unset KDIR # for make module KDIR=...; this uses the project's kernels
source "$(dirname "$0")/lib.sh"
export MSVM_VARIANT=release
MSVM_KDIR=$MSVM_CACHE/build-release
B=$MSVM_TOP/build
mkdir -p "$B"

"$MSVM_TOP/scripts/setup.sh" release
msvm_stage module "$MSVM_TOP/scripts/build.sh" module >/dev/null
msvm_stage tools "$MSVM_TOP/scripts/build.sh" tools
msvm_stage device "$MSVM_TOP/scripts/build.sh" device
msvm_stage hmm-bench "$MSVM_TOP/scripts/build.sh" hmm-bench
msvm_stage ze "$MSVM_TOP/scripts/build.sh" ze
"$MSVM_TOP/scripts/mkinitramfs.sh" "$B/bench-initramfs.cpio"
rc=0
# The figures are the CPU engine's, on ivshmem GPUs as at the stops
# before the device model (whose engines the driver does not use for
# migration or jobs yet: Documentation/hardware.rst, "Status"); the QEMU
# is the one make test uses (11.1, $MSVM_QEMU), as ratios within a boot.
boot() {
	python3 "$MSVM_TOP/scripts/vm.py" --device ivshmem --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
		--initrd "$B/bench-initramfs.cpio" --gpus sw,sw,rp --vram 2G --mem 4G --prealloc \
		--cmd bench --quiet-boot "$@"
}
# Wall clock (throughput), then the deterministic mode (ratios of the
# driver's own work; MSVM_BENCH_ICOUNT=0 skips it). MSVM_BENCH_MAIN=0 skips
# both (only the placement and scale boots run).
rm -f "$B/bench-console.log" "$B/bench-icount.log"
if [ "${MSVM_BENCH_MAIN:-1}" != 0 ]; then
	boot --log "$B/bench-console.log" --timeout 1200 || rc=$?
fi
if [ "${MSVM_BENCH_ICOUNT:-1}" != 0 ] && [ "${MSVM_BENCH_MAIN:-1}" != 0 ]; then
	# One vCPU: with two, single-threaded TCG under -icount starves the
	# idle vCPU's timer softirq while the other runs, and RCU reports
	# stalls that are the emulator's.
	boot --icount --smp 1 --log "$B/bench-icount.log" --timeout 2400 || rc=$?
fi

# The placement workloads, on 256 MiB GPUs, each policy in turn (wall
# clock; MSVM_BENCH_PLACEMENT=0 skips it).
rm -f "$B/bench-placement.log"
if [ "${MSVM_BENCH_PLACEMENT:-1}" != 0 ]; then
	python3 "$MSVM_TOP/scripts/vm.py" --device ivshmem --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
		--initrd "$B/bench-initramfs.cpio" --gpus sw,sw,rp --vram 256M --mem 2G \
		--cmd bench-placement --quiet-boot --log "$B/bench-placement.log" --timeout 1200 || rc=$?
fi

# Scale: the 8-GPU server (two NUMA nodes, a host bridge each), costs on
# 3 devices against 8 (MSVM_BENCH_SCALE8=0 skips it).
rm -f "$B/bench-scale8.log"
if [ "${MSVM_BENCH_SCALE8:-1}" != 0 ]; then
	python3 "$MSVM_TOP/scripts/vm.py" --device ivshmem --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
		--initrd "$B/bench-initramfs.cpio" --gpus 8gpu --vram 256M --mem 2G \
		--cmd bench-scale8 --quiet-boot --log "$B/bench-scale8.log" --timeout 900 || rc=$?
fi

# The device model: msvm-gpu's copy engine against the CPU's copies for
# the same migrations, in one boot (MSVM_BENCH_HW=0 skips it).
rm -f "$B/bench-hw.log"
if [ "${MSVM_BENCH_HW:-1}" != 0 ]; then
	python3 "$MSVM_TOP/scripts/vm.py" --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
		--initrd "$B/bench-initramfs.cpio" --gpus sw,sw,rp --vram 512M --mem 2G \
		--cmd bench-hw --quiet-boot --log "$B/bench-hw.log" --timeout 900 || rc=$?
fi

# Behind a strict virtual IOMMU, with a CPU whose host bridges pass P2P: a
# job reading a peer through the host bridge against one reading a peer
# inside the switch; migrations with the GPU's IOMMU group strict, lazy and
# in passthrough; the fault round trip behind the IOMMU (MSVM_BENCH_IOMMU=0
# skips it).
rm -f "$B/bench-iommu.log"
if [ "${MSVM_BENCH_IOMMU:-1}" != 0 ]; then
	MSVM_KVM=0 python3 "$MSVM_TOP/scripts/vm.py" --kernel "$MSVM_KDIR/arch/x86/boot/bzImage" \
		--initrd "$B/bench-initramfs.cpio" --gpus sw,sw,rp --vram 512M --mem 2G \
		--iommu intel --cpu zen --append "intel_iommu=on iommu.strict=1" \
		--cmd bench-iommu --quiet-boot --log "$B/bench-iommu.log" --timeout 900 || rc=$?
fi

python3 - "$B/bench-console.log" "$B/bench-icount.log" "$B/bench-placement.log" "$B/bench-scale8.log" "$B/bench-hw.log" "$B/bench-iommu.log" <<'PY'
import os, re, sys
vals, units = {}, {}
for path, suffix in ((sys.argv[1], ""), (sys.argv[2], ".icount"), (sys.argv[3], ""), (sys.argv[4], ""), (sys.argv[5], ""), (sys.argv[6], "")):
    if not os.path.exists(path):
        continue
    for line in open(path, errors="replace"):
        m = re.match(r"BENCH (\S+) ([0-9.]+) (\S+)", line.strip())
        if m:
            vals[m.group(1) + suffix] = float(m.group(2))
            units[m.group(1) + suffix] = m.group(3)
print()
print(f"{'GiB/s':<22}{'msvm':>9}{'test_hmm':>10}{'msvm/hmm':>10}{'floor':>9}{'effic.':>8}{'msvm/memcpy':>13}")
for size in ("64M", "256M", "1024M"):
    for op in ("to_dev", "to_dev_4k", "to_sys", "to_sys_4k", "fault_back", "fault_back_4k"):
        name = f"{op}_{size}"
        a, b = vals.get(name + ".msvm"), vals.get(name + ".test_hmm")
        mc = vals.get(f"memcpy{'_4k' if '_4k' in op else ''}_{size}")
        if a is None or b is None:
            continue
        fl, ef = vals.get(name + ".floor", 0), vals.get(name + ".efficiency", 0)
        print(f"{name:<22}{a:>9.3f}{b:>10.3f}{a / b:>9.2f}x{fl:>9.3f}{ef:>8.2f}{(a / mc if mc else 0):>12.0%}")
    mc = vals.get(f"memcpy_{size}")
    if mc:
        print(f"{'memcpy_' + size:<22}{mc:>9.3f}")
if any(k.startswith("to_dev_2m_") for k in vals):
    # The cost of the default: THPs moved in 4 KiB device pages against
    # the same moves with 2 MiB device folios (large_folios=1).
    print()
    print(f"{'THP on, GiB/s':<22}{'default':>9}{'2m fol.':>9}{'def/2m':>8}{'test_hmm':>10}{'2m/hmm':>8}")
    for size in ("64M", "256M", "1024M"):
        for op in ("to_dev", "to_sys", "fault_back"):
            a, b = vals.get(f"{op}_{size}.msvm"), vals.get(f"{op}_2m_{size}.msvm")
            h = vals.get(f"{op}_{size}.test_hmm")
            if a is None or b is None:
                continue
            vals[f"{op}_{size}.default_vs_2m"] = a / b
            units[f"{op}_{size}.default_vs_2m"] = "x"
            print(f"{op + '_' + size:<22}{a:>9.3f}{b:>9.3f}{a / b:>7.2f}x"
                  + (f"{h:>10.3f}{b / h:>7.2f}x" if h else ""))
if any(k.endswith(".icount") for k in vals):
    print()
    print(f"{'deterministic (icount)':<22}{'msvm':>9}{'test_hmm':>10}{'msvm/hmm':>10}{'effic.':>8}")
    for size in ("64M", "256M", "1024M"):
        for op in ("to_dev", "to_dev_4k", "to_sys", "to_sys_4k", "fault_back", "fault_back_4k"):
            name = f"{op}_{size}"
            a, b = vals.get(name + ".msvm.icount"), vals.get(name + ".test_hmm.icount")
            if a is None or b is None:
                continue
            ef = vals.get(name + ".efficiency.icount", 0)
            print(f"{name:<22}{a:>9.3f}{b:>10.3f}{a / b:>9.2f}x{ef:>8.2f}")
print()
print(f"{'phase split, ms':<22}{'total':>9}{'steps':>7}{'collect':>9}{'alloc':>8}{'copy':>9}{'install':>9}{'other':>8}")
for size in ("64M", "256M", "1024M"):
    for op in ("to_dev", "to_dev_4k", "to_sys", "to_sys_4k", "fault_back", "fault_back_4k"):
        name = f"{op}_{size}"
        if name + ".total_ms" not in vals:
            continue
        t = vals[name + ".total_ms"]
        ph = [vals.get(f"{name}.{p}_ms", 0) for p in ("collect", "alloc", "copy", "install")]
        print(f"{name:<22}{t:>9.1f}{vals.get(name + '.steps', 0):>7.0f}" + "".join(f"{x:>9.1f}" if i != 1 else f"{x:>8.1f}" for i, x in enumerate(ph)) + f"{t - sum(ph):>8.1f}")
# The driver's own overhead against the reference driver's: msvm's mm work
# (collect + allocate + install, from its phase split) over test_hmm's time
# less its copy (copy_highpage() over the same bytes, timed by msvm's copy
# floor in the same boot). At most 1.0 meets the target. The phase split is
# the last round's, test_hmm's time the best round's (the same, within
# noise, in the deterministic mode, where the target applies).
ov_rows = []
for suffix in ("", ".icount"):
    for size in ("64M", "256M", "1024M"):
        for op in ("to_dev", "to_dev_4k", "to_sys", "to_sys_4k", "fault_back", "fault_back_4k"):
            name = f"{op}_{size}"
            tag = "_4k" if op.endswith("_4k") else ""
            mm = [vals.get(f"{name}.{p}_ms{suffix}") for p in ("collect", "alloc", "install")]
            total = vals.get(f"{name}.total_ms{suffix}")
            hmm = vals.get(f"{name}.test_hmm{suffix}")
            hcopy = vals.get(f"copy_highpage{tag}_{size}.ms{suffix}")
            if None in mm or total is None or not hmm or hcopy is None:
                continue
            hmm_ms = int(size[:-1]) / 1024 / hmm * 1e3
            rest = hmm_ms - hcopy
            if rest <= 0:
                continue
            vals[f"{name}.overhead_vs_test_hmm{suffix}"] = sum(mm) / rest
            units[f"{name}.overhead_vs_test_hmm{suffix}"] = "x"
            ov_rows.append((name + suffix, sum(mm), total - vals.get(f"{name}.copy_ms{suffix}", 0), hmm_ms, hcopy, rest))
if ov_rows:
    print()
    print(f"{'mm work, ms':<28}{'msvm':>9}{'msvm all':>10}{'test_hmm':>10}{'its copy':>10}{'its mm':>9}{'ratio':>8}")
    for name, mm, allnc, hmm_ms, hcopy, rest in ov_rows:
        print(f"{name:<28}{mm:>9.1f}{allnc:>10.1f}{hmm_ms:>10.1f}{hcopy:>10.1f}{rest:>9.1f}{mm / rest:>7.2f}x")
    print("(msvm: collect + alloc + install; msvm all: total less copy; ratio: msvm / its mm)")
print()
print(f"{'scaling, GiB/s':<18}{'64M':>8}{'256M':>8}{'1024M':>8}{'1G/64M':>8}{'icount 1G/64M':>15}")
for op in ("to_dev", "to_dev_4k", "to_sys", "to_sys_4k", "fault_back", "fault_back_4k"):
    row = [vals.get(f"{op}_{s}.msvm") for s in ("64M", "256M", "1024M")]
    ic = [vals.get(f"{op}_{s}.msvm.icount") for s in ("64M", "1024M")]
    if None in row:
        continue
    icr = f"{ic[1] / ic[0]:>14.2f}x" if None not in ic else f"{'-':>15}"
    print(f"{op:<18}" + "".join(f"{x:>8.3f}" for x in row) + f"{row[2] / row[0]:>7.2f}x" + icr)
print()
mp = {k: vals.get(k + "_64M") for k in ("local_checksum", "peer_inplace_checksum",
      "migrate_then_checksum", "d2d_migrate_p2p", "d2d_migrate_via_ram")}
if all(v for v in mp.values()):
    print(f"{'GiB/s, 64 MiB':<32}{'':>9}")
    for k, v in mp.items():
        print(f"{k:<32}{v:>9.3f}")
    print(f"{'peer in place / local':<32}{mp['peer_inplace_checksum'] / mp['local_checksum']:>8.2f}x")
    print(f"{'peer in place / migrate+run':<32}{mp['peer_inplace_checksum'] / mp['migrate_then_checksum']:>8.2f}x")
    print(f"{'d2d p2p / via RAM':<32}{mp['d2d_migrate_p2p'] / mp['d2d_migrate_via_ram']:>8.2f}x")
    ef = vals.get("d2d_migrate_p2p_64M.efficiency")
    if ef:
        print(f"{'d2d p2p efficiency (floor/op)':<32}{ef:>8.2f}")
    print()
paths = ("vram", "p2p", "dma", "move_4k", "move_64k", "move_2m", "cpu_fault_4k", "cpu_fault_2m")
if any(f"latency_{p}_p50_us" in vals for p in paths):
    print(f"{'latency, us (gpu0)':<24}{'p50':>9}{'p99':>9}{'max':>9}")
    for p in paths:
        for name in (p, p + "_checksum"):
            if f"latency_{name}_p50_us" in vals:
                print(f"{name:<24}" + "".join(f"{vals[f'latency_{name}_{q}_us']:>9.1f}" for q in ("p50", "p99", "max")))
    v, q = vals.get("latency_vram_p50_us"), vals.get("latency_p2p_p50_us")
    if v and q:
        print(f"{'p2p / vram p50':<24}{q / v:>8.2f}x")
    print()
if "ze_overhead_64M" in vals:
    p = lambda k: vals.get(k, float("nan"))
    print(f"{'Level Zero / msvm-rt':<24}{'ratio':>8}{'ze ms':>10}{'rt ms':>10}")
    for n in ("ze_overhead_64M", "ze_overhead_4K"):
        print(f"{n:<24}{p(n):>7.3f}x{p(n + '.ze_ms'):>10.3f}{p(n + '.msvm_rt_ms'):>10.3f}")
    print()
if "warm_job_64M.overhead" in vals:
    p = lambda k: vals.get(k, float("nan"))
    print(f"{'device page tables (gpu0)':<32}")
    print(f"{'warm 64 MiB job: whole/engine':<32}{p('warm_job_64M.overhead'):>8.3f}x  (faulting: {p('warm_job_64M.overhead_fault'):.3f}x)")
    print(f"{'fault latency, us':<24}{'first p50':>10}{'p99':>9}{'max':>9}{'warm p50':>10}{'p99':>9}{'max':>9}")
    for path in ("own", "p2p", "dma", "move_4k", "move_64k", "move_2m"):
        k = f"latency_fault_{path}"
        print(f"{path:<24}" + "".join(f"{p(f'{k}_{w}_{q}_us'):>{10 if q == 'p50' else 9}.1f}"
                                      for w in ("first", "warm") for q in ("p50", "p99", "max")))
    print(f"{'warm p2p / warm own p50':<32}{p('latency_fault_p2p_warm_p50_us') / p('latency_fault_own_warm_p50_us'):>8.2f}x")
    print(f"{'first move_4k / first p2p p50':<32}{p('latency_fault_move_4k_first_p50_us') / p('latency_fault_p2p_first_p50_us'):>8.2f}x")
    f, q = p("first_touch_64M.faulting"), p("first_touch_64M.prefetched")
    print(f"{'first touch 64 MiB, GiB/s':<32}faulting {f:.3f}, prefetched {q:.3f}: {f / q:.2f}x")
    i = [p(f"invalidate_64M_{n}dev_us") for n in (1, 2, 3)]
    z = [p(f"invalidate_64M_{n}dev_zap_us") for n in (1, 2, 3)]
    print(f"{'munmap 64 MiB on 1/2/3 devices':<32}{i[0]:.0f} / {i[1]:.0f} / {i[2]:.0f} us; zapping {z[0]:.0f} / {z[1]:.0f} / {z[2]:.0f} us"
          f" (3-device zap / 3 over 1-device: {z[2] / 3 / z[0]:.2f}x)")
    print()
if "scale_2proc_2dev.speedup" in vals:
    print(f"{'scale (warm 64 MiB CHECKSUMs x 8)':<32}1 process on 1 GPU {vals['scale_1proc_1dev_s']:.3f} s, "
          f"2 on 2 GPUs {vals['scale_2proc_2dev_s']:.3f} s: speedup {vals['scale_2proc_2dev.speedup']:.2f}x")
    locks = [k[len("scale_2proc_2dev_lock_"):-len("_contended")] for k in vals
             if k.startswith("scale_2proc_2dev_lock_") and k.endswith("_contended")]
    for l in locks:
        a = vals.get(f"scale_2proc_2dev_lock_{l}_acquired", 0)
        c = vals[f"scale_2proc_2dev_lock_{l}_contended"]
        print(f"{'  global lock ' + l:<32}{a:.0f} acquisitions, {c:.0f} found it held")
    print()
if "scale_query.growth" in vals:
    print(f"{'8-GPU server, ms':<22}{'3 GPUs':>9}{'8 GPUs':>9}{'growth':>8}   (cost with 8 / 8 over cost with 3 / 3)")
    for op in ("query", "vm_create", "invalidate", "stats", "unplug"):
        if f"scale_{op}.growth" in vals:
            print(f"{op:<22}{vals[f'scale_{op}_3dev_ms']:>9.2f}{vals[f'scale_{op}_8dev_ms']:>9.2f}"
                  f"{vals[f'scale_{op}.growth']:>7.2f}x")
    if "policy_bytes_per_block" in vals:
        print(f"{'policy state per 2 MiB block':<22}{vals['policy_bytes_per_block']:>9.0f} bytes")
    for l in ("topology", "processes"):
        if f"scale8_lock_{l}_acquired" in vals:
            print(f"{'global lock ' + l:<22}{vals[f'scale8_lock_{l}_acquired']:>9.0f} acquisitions, "
                  f"{vals[f'scale8_lock_{l}_contended']:.0f} found it held")
    print()
if any(k.startswith("hw_migrate") for k in vals):
    print(f"{'msvm-gpu copy engine, GiB/s':<32}{'engine':>9}{'CPU':>9}{'speedup':>9}")
    for tag in ("_4k", "_2m"):
        for d in ("to_dev", "to_sys"):
            k = f"hw_migrate{tag}_64M_{d}"
            if f"{k}.speedup" in vals:
                print(f"{k:<32}{vals[k + '.engine']:>9.3f}{vals[k + '.cpu']:>9.3f}{vals[k + '.speedup']:>8.2f}x")
    print()
if any(k.startswith("hw_warm_job") for k in vals):
    print(f"{'msvm-gpu job engine, GiB/s':<32}{'device':>9}{'CPU':>9}{'speedup':>9}")
    for op in ("checksum", "atomic_add"):
        k = f"hw_warm_job_64M_{op}"
        if f"{k}.speedup" in vals:
            print(f"{k:<32}{vals[k + '.device']:>9.3f}{vals[k + '.cpu']:>9.3f}{vals[k + '.speedup']:>8.2f}x")
    if "hw_warm_job_64M.overhead" in vals:
        print(f"{'hw_warm_job_64M.overhead':<32}{vals['hw_warm_job_64M.overhead']:>9.3f}x  (CHECKSUM ioctl time over the device's JOB_BUSY time)")
    if "hw_p2p_over_own_64M" in vals:
        print(f"{'hw_p2p_over_own_64M':<32}{vals['hw_p2p_over_own_64M']:>9.2f}x  (gpu1's CHECKSUM of gpu0's VRAM over P2P, over gpu0's own)")
    print()
if "latency_hwfault_nofault_p50_us" in vals:
    print(f"{'msvm-gpu fault round trip, us':<32}{'p50':>9}{'p99':>9}   (a 4 KiB job, ioctl to ioctl)")
    for kind in ("own", "dma", "p2p"):
        for mode in ("first", "warm"):
            k = f"latency_hwfault_{kind}_{mode}"
            if f"{k}_p50_us" in vals:
                print(f"{k:<32}{vals[k + '_p50_us']:>9.1f}{vals[k + '_p99_us']:>9.1f}")
    print(f"{'the same job, no fault':<32}{vals['latency_hwfault_nofault_p50_us']:>9.1f}")
    print()
lc = [k for k in ("pagemap_create_16M", "pagemap_teardown_16M", "first_touch_16M",
      "pagemap_create_64M", "pagemap_teardown_64M", "first_touch_64M", "warm_touch_64M",
      "pagemap_create_256M", "pagemap_teardown_256M", "first_touch_256M",
      "shrink_idle_chunks", "shrink_consolidate", "memmap_pct_before_shrink",
      "memmap_pct_of_resident") if k in vals]
if lc:
    print(f"{'pagemap lifecycle (1 GiB device)':<32}")
    for k in lc:
        print(f"{k:<32}{vals[k]:>9.3f} {units[k]}")
    print()
if "oversub_hot_hit_pct.on" in vals:
    print(f"{'oversubscription (256 MiB GPU)':<32}{'hot hit %':>10}{'evicted':>9}{'no_vram MiB':>12}{'s':>8}")
    for m in ("off", "lru", "on"):
        if f"oversub_hot_hit_pct.{m}" in vals:
            print(f"{'evict=' + m:<32}{vals[f'oversub_hot_hit_pct.{m}']:>10.1f}{vals[f'oversub_evict_blocks.{m}']:>9.0f}"
                  f"{vals[f'oversub_no_vram_mib.{m}']:>12.0f}{vals[f'oversub_s.{m}']:>8.2f}")
    print()
    for case, what in (("shift", "shift (2 sets of 2/3 GPU)"), ("cyclic", "cycle (1.5x GPU, in order)")):
        if f"oversub_{case}_hit_pct.on" not in vals:
            continue
        print(f"{what:<32}{'hit %':>10}{'evicted':>9}{'refaults':>12}{'s':>8}")
        for m in ("off", "lru", "on"):
            k = f"oversub_{case}_hit_pct.{m}"
            if k in vals:
                print(f"{'evict=' + m:<32}{vals[k]:>10.1f}{vals[f'oversub_{case}_evict_blocks.{m}']:>9.0f}"
                      f"{vals[f'oversub_{case}_refaults.{m}']:>12.0f}{vals[f'oversub_{case}_s.{m}']:>8.2f}")
        print()
if "pingpong_64M.on" in vals and "pingpong_64M.off" in vals:
    print(f"{'thrashing (64 MiB, 50 rounds)':<32}{'off s':>8}{'on s':>8}{'off/on':>8}{'MiB off':>9}{'MiB on':>8}{'off/on':>8}")
    p = lambda k: vals.get(k, float("nan"))
    bo, bn = p("pingpong_64M.bytes_off") / 2**20, p("pingpong_64M.bytes_on") / 2**20
    print(f"{'pingpong (CPU writes, gpu0 adds)':<32}{p('pingpong_64M.off'):>8.2f}{p('pingpong_64M.on'):>8.2f}"
          f"{p('pingpong_64M.off') / p('pingpong_64M.on'):>8.2f}{bo:>9.0f}{bn:>8.0f}{bo / max(bn, 1e-9):>8.1f}")
    print(f"{'stream (migrate once, 50 uses)':<32}{p('stream_64M.off'):>8.2f}{p('stream_64M.on'):>8.2f}"
          f"{p('stream_64M.off') / p('stream_64M.on'):>8.2f}")
    print()
if "hot_remote_64M.on" in vals:
    p = lambda k: vals.get(k, float("nan"))
    print(f"{'access counters (64 MiB, 100 rounds)':<40}{'last 10 s':>10}{'own VRAM s':>11}{'own/it':>8}{'MiB moved':>10}")
    for m, local in (("off", "local_off"), ("on", "local")):
        if f"hot_remote_64M.{m}" in vals:
            print(f"{'hot remote, access_counters ' + m:<40}{p(f'hot_remote_64M.{m}'):>10.2f}{p(f'hot_remote_64M.{local}'):>11.2f}"
                  f"{p(f'hot_remote_64M.{local}') / p(f'hot_remote_64M.{m}'):>8.2f}{p(f'hot_remote_64M.moved_{m}') / 2**20:>10.0f}")
    print()
if "tenants_min_hit_pct.on" in vals or "tenants_min_hit_pct.off" in vals:
    p = lambda k: vals.get(k, float("nan"))
    print(f"{'two tenants, one full device':<36}{'A %':>8}{'B %':>8}{'min %':>8}{'s':>8}   (share of reads from VRAM)")
    for m in ("off", "on"):
        if f"tenants_min_hit_pct.{m}" in vals:
            print(f"{'dmem.low ' + ('112M each' if m == 'on' else 'none'):<36}{p(f'tenants_hit_pct_a.{m}'):>8.1f}"
                  f"{p(f'tenants_hit_pct_b.{m}'):>8.1f}{p(f'tenants_min_hit_pct.{m}'):>8.1f}{p(f'tenants_s.{m}'):>8.1f}")
    print()
if "read_shared_64M.on" in vals:
    p = lambda k: vals.get(k, float("nan"))
    print(f"{'read-shared weights (64 MiB, 3 GPUs x 20)':<36}{'s':>8}{'x on':>7}{'MiB moved':>10}{'MiB copied':>11}"
          f"{'place s':>8}{'bind s':>8}{'exec s':>8}")
    for m in ("on", "migrate", "default"):
        if f"read_shared_64M.{m}" in vals:
            print(f"{'read_shared, ' + m:<36}{p(f'read_shared_64M.{m}'):>8.2f}{p(f'read_shared_64M.{m}') / p('read_shared_64M.on'):>7.2f}"
                  f"{p(f'read_shared_64M.moved_{m}') / 2**20:>10.0f}{p(f'read_shared_64M.replicated_{m}') / 2**20:>11.0f}"
                  f"{p(f'read_shared_64M.place_{m}'):>8.2f}{p(f'read_shared_64M.bind_{m}'):>8.2f}{p(f'read_shared_64M.exec_{m}'):>8.2f}")
    print()
for k in sorted(vals):
    print(f"BENCH {k} {vals[k]:.3f} {units[k]}")
PY
# Debian's python3 has python3-matplotlib (a python3 earlier in PATH may not).
if [ -e "$B/bench-console.log" ]; then
	/usr/bin/python3 "$MSVM_TOP/scripts/bench-plot.py" "$B/bench-console.log" "$B/bench.svg" || rc=1
fi
exit $rc
