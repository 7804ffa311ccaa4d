//! The msvm side of `make bench`: the same moves as tests/bench/hmm_bench.c
//! does with test_hmm, timed the same way, plus a guest memcpy.
//!
//! `msvm-tests bench SIZE_MIB TAG` prints
//! `BENCH <op><TAG>_<SIZE>M.msvm <GiB/s> GiB/s` lines and
//! `BENCH memcpy<TAG>_<SIZE>M <GiB/s> GiB/s` (TAG is empty or `_4k`, THP
//! on or off; `_2m` for msvm loaded with `large_folios=1`, THP on).

use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::time::Instant;

use msvm_rt::{Device, Exec, Location, Stats};
use nix::sys::mman::{madvise, mmap_anonymous, munmap, MapFlags, MmapAdvise, ProtFlags};

use crate::svm::{gpu0, PAGE};

const HUGE: usize = 2 << 20;

/// Rounds of each timed move (the best counts).
const ROUNDS: usize = 3;

/// A 2 MiB aligned anonymous buffer (THP can back it when enabled). Left
/// mapped, unless given to [`unmap`]: the bench process exits right after.
pub(crate) fn buffer(len: usize) -> Result<&'static mut [u64], String> {
    // SAFETY: a fresh anonymous mapping aliases nothing.
    let p = unsafe {
        mmap_anonymous(
            None,
            NonZeroUsize::new(len + HUGE).ok_or("empty")?,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_PRIVATE,
        )
    }
    .map_err(|e| e.to_string())?;
    let a = (p.as_ptr() as usize).next_multiple_of(HUGE);
    // SAFETY: advice on our own mapping.
    let _ = unsafe {
        madvise(
            NonNull::new(a as *mut _).unwrap(),
            len,
            MmapAdvise::MADV_HUGEPAGE,
        )
    };
    // SAFETY: `[a, a + len)` lies in the mapping, which is unmapped only
    // once its slice is given up (`unmap`).
    Ok(unsafe { std::slice::from_raw_parts_mut(a as *mut u64, len / 8) })
}

/// Unmaps `b`, memory from [`buffer`] (its pages, wherever they are, are
/// freed).
///
/// # Safety
///
/// `b` came from [`buffer`], and nothing refers to its memory any more.
unsafe fn unmap(b: &'static mut [u64]) -> Result<(), String> {
    let p = NonNull::new(b.as_mut_ptr().cast()).ok_or("null")?;
    // SAFETY: the caller's promise: a range of our own mapping that
    // nothing uses.
    unsafe { munmap(p, b.len() * 8) }.map_err(|e| format!("munmap: {e}"))
}

/// Seconds a MIGRATE of `[addr, addr + len)` to `to` took; an error unless
/// it moved every page.
pub(crate) fn timed_migrate(
    dev: &Device,
    addr: usize,
    len: usize,
    to: Location,
) -> Result<f64, String> {
    let t = Instant::now();
    let out = dev.migrate(addr, len, to).map_err(|e| e.to_string())?;
    let secs = t.elapsed().as_secs_f64();
    if out.moved != (len / PAGE) as u64 {
        return Err(format!("moved {out:?} of {} pages", len / PAGE));
    }
    Ok(secs)
}

pub(crate) fn gibps(len: usize, secs: f64) -> f64 {
    len as f64 / secs / f64::from(1u32 << 30)
}

const COPY_FLOOR: &str = "/sys/kernel/debug/msvm/copy_floor";

/// The copy floor of device `dev` over `mib` MiB (debugfs `copy_floor`, the
/// driver's copy primitives with no mm work): the best of [`ROUNDS`] runs,
/// in seconds, by path (`to_dev_4k`, `to_sys_2m`, `p2p_2m`, ...).
fn copy_floor(dev: u32, mib: usize) -> Result<Vec<(String, f64)>, String> {
    let mut best: Vec<(String, f64)> = Vec::new();
    for _ in 0..ROUNDS {
        std::fs::write(COPY_FLOOR, format!("{dev} {mib}"))
            .map_err(|e| format!("write {COPY_FLOOR}: {e}"))?;
        let text =
            std::fs::read_to_string(COPY_FLOOR).map_err(|e| format!("read {COPY_FLOOR}: {e}"))?;
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [name, _bytes, ns] = f[..] else {
                return Err(format!("{COPY_FLOOR}: {line:?}"));
            };
            let Ok(ns) = ns.parse::<u64>() else {
                continue;
            };
            let secs = ns as f64 / 1e9;
            match best.iter_mut().find(|(n, _)| n == name) {
                Some((_, b)) => *b = b.min(secs),
                None => best.push((name.to_string(), secs)),
            }
        }
    }
    Ok(best)
}

/// Prints the floor and the efficiency (floor time / operation time) of
/// movement `name` (`len` bytes in `secs`) against floor path `path`.
fn report_floor(name: &str, len: usize, secs: f64, floor: &[(String, f64)], path: &str) {
    let Some(&(_, f)) = floor.iter().find(|(n, _)| n == path) else {
        return;
    };
    println!("BENCH {name}.floor {:.3} GiB/s", gibps(len, f));
    println!("BENCH {name}.efficiency {:.3} x", f / secs);
}

pub fn run(mib: usize, tag: &str) -> Result<(), String> {
    let len = mib << 20;
    let dev = gpu0()?;
    let p = buffer(len)?;
    for (i, w) in p.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    let report =
        |op: &str, secs: f64| println!("BENCH {op}{tag}_{mib}M.msvm {:.3} GiB/s", gibps(len, secs));
    let addr = p.as_ptr() as usize;
    let mv = |to| timed_migrate(&dev, addr, len, to);
    // How many 2 MiB folios each move took whole (the rest went in 4 KiB
    // pages), and where its steps spent their time (all size classes), from
    // the device's counters around it.
    let large = |op: &str, before: &msvm_rt::Stats, now: &msvm_rt::Stats| {
        let n = if op == "to_dev" {
            now.large_to_device - before.large_to_device
        } else {
            now.large_to_system - before.large_to_system
        };
        println!("BENCH {op}{tag}_{mib}M.msvm_2m_folios {n} folios");
        let diff = |a: &[u64; 3], b: &[u64; 3]| -> f64 {
            a.iter().zip(b).map(|(x, y)| x - y).sum::<u64>() as f64 / 1e3
        };
        let steps: u64 = now
            .phase_steps
            .iter()
            .zip(&before.phase_steps)
            .map(|(x, y)| x - y)
            .sum();
        println!("BENCH {op}{tag}_{mib}M.steps {steps} steps");
        for (phase, a, b) in [
            ("collect", &now.phase_collect_us, &before.phase_collect_us),
            ("alloc", &now.phase_alloc_us, &before.phase_alloc_us),
            ("copy", &now.phase_copy_us, &before.phase_copy_us),
            ("install", &now.phase_install_us, &before.phase_install_us),
        ] {
            println!("BENCH {op}{tag}_{mib}M.{phase}_ms {:.3} ms", diff(a, b));
        }
    };
    let stats = || dev.stats().map_err(|e| e.to_string());
    // Best of ROUNDS round trips, as hmm-bench does: under TCG single runs
    // move by 2x. The folio counts are those of the last round.
    let mut best = [f64::MAX; 3];
    // The last round's times: its phase split is what the counters show.
    let mut last = [0.0; 3];
    let mut sum = 0u64;
    let mut counts = Vec::new();
    for _ in 0..ROUNDS {
        counts.clear();
        let s = stats()?;
        last[0] = mv(Location::Device)?;
        best[0] = best[0].min(last[0]);
        counts.push(("to_dev", s, stats()?));
        let s = stats()?;
        last[1] = mv(Location::System)?;
        best[1] = best[1].min(last[1]);
        counts.push(("to_sys", s, stats()?));
        mv(Location::Device)?;
        let s = stats()?;
        let t = Instant::now();
        for i in (0..p.len()).step_by(PAGE / 8) {
            // SAFETY: reading our own buffer; volatile so the loop is kept.
            sum = sum.wrapping_add(unsafe { std::ptr::read_volatile(&p[i]) });
        }
        last[2] = t.elapsed().as_secs_f64();
        best[2] = best[2].min(last[2]);
        counts.push(("fault_back", s, stats()?));
    }
    for ((op, secs), last) in ["to_dev", "to_sys", "fault_back"]
        .iter()
        .zip(best)
        .zip(last)
    {
        report(op, secs);
        println!("BENCH {op}{tag}_{mib}M.total_ms {:.3} ms", last * 1e3);
    }
    // The same bytes through the same copies, with no mm work.
    let floor = copy_floor(dev.index().map_err(|e| e.to_string())?, mib)?;
    // The floor of the size the moves took: 2 MiB folios if any moved
    // whole (THPs, with msvm's `large_folios=1`), 4 KiB pages otherwise.
    let whole = counts
        .iter()
        .any(|(_, before, now)| now.large_to_device > before.large_to_device);
    let size = if whole { "2m" } else { "4k" };
    for (op, secs, path) in [
        ("to_dev", best[0], "to_dev"),
        ("to_sys", best[1], "to_sys"),
        ("fault_back", best[2], "to_sys"),
    ] {
        report_floor(
            &format!("{op}{tag}_{mib}M"),
            len,
            secs,
            &floor,
            &format!("{path}_{size}"),
        );
    }
    // test_hmm's copy of the same bytes (copy_highpage(), system RAM to
    // system RAM): make bench takes it out of test_hmm's time to compare
    // the two drivers' mm work.
    // test_hmm moves THPs whole whatever msvm does: its copy's size
    // follows THP (off only with tag `_4k`).
    let hmm_size = if tag == "_4k" { "4k" } else { "2m" };
    if let Some(&(_, f)) = floor.iter().find(|(n, _)| *n == format!("ram_{hmm_size}")) {
        println!("BENCH copy_highpage{tag}_{mib}M.ms {:.3} ms", f * 1e3);
    }
    for (op, before, now) in &counts {
        large(op, before, now);
    }
    for (i, &w) in p.iter().enumerate() {
        if w != (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) {
            return Err(format!("data lost at word {i}"));
        }
    }
    // The physical limit of a CPU-copy engine: a guest memcpy of the size.
    let q = buffer(len)?;
    q.fill(1);
    let mut secs = f64::MAX;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        q.copy_from_slice(p);
        secs = secs.min(t.elapsed().as_secs_f64());
    }
    println!("BENCH memcpy{tag}_{mib}M {:.3} GiB/s", gibps(len, secs));
    std::hint::black_box((sum, &q[0]));
    Ok(())
}

/// `msvm-tests bench-p2p SIZE_MIB`: execution out of a peer's memory and
/// device-to-device migration, each timed once, as
/// `BENCH <name>_<SIZE>M <GiB/s> GiB/s` lines.
pub fn run_p2p(mib: usize) -> Result<(), String> {
    let len = mib << 20;
    let (a, b, c) = crate::multi::devices()?;
    let p = buffer(len)?;
    for (i, w) in p.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    let addr = p.as_ptr() as usize;
    let report =
        |name: &str, secs: f64| println!("BENCH {name}_{mib}M {:.3} GiB/s", gibps(len, secs));
    let timed = |f: &dyn Fn() -> Result<(), String>| -> Result<f64, String> {
        let t = Instant::now();
        f()?;
        Ok(t.elapsed().as_secs_f64())
    };
    // Every move must move every page, or a timing would measure nothing.
    let mv = |d: &msvm_rt::Device, to| -> Result<(), String> {
        let out = d.migrate(addr, len, to).map_err(|e| e.to_string())?;
        if out.moved != (len / PAGE) as u64 {
            return Err(format!("moved {out:?} of {} pages", len / PAGE));
        }
        Ok(())
    };
    let sum = |d: &msvm_rt::Device, in_place| {
        d.exec(msvm_rt::Exec::Checksum, addr, len, in_place)
            .map(drop)
            .map_err(|e| e.to_string())
    };
    mv(&a, Location::Device)?;
    report("local_checksum", timed(&|| sum(&a, true))?);
    mv(&b, Location::Device)?;
    report("peer_inplace_checksum", timed(&|| sum(&a, true))?);
    // Still on B: the default policy migrates it to A, then runs.
    report("migrate_then_checksum", timed(&|| sum(&a, false))?);
    mv(&b, Location::Device)?;
    let secs = timed(&|| mv(&a, Location::Device))?;
    report("d2d_migrate_p2p", secs);
    // C is out of A's P2P reach: one MIGRATE to A takes the data C -> RAM
    // -> A.
    mv(&a, Location::System)?;
    mv(&c, Location::Device)?;
    report("d2d_migrate_via_ram", timed(&|| mv(&a, Location::Device))?);
    for (i, &w) in p.iter().enumerate() {
        if w != (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) {
            return Err(format!("data lost at word {i}"));
        }
    }
    // The floor of the P2P move: B's VRAM to A's, page by page (the check
    // above brought the data back to system RAM).
    a.migrate(addr, len, Location::System)
        .map_err(|e| e.to_string())?;
    let floor = copy_floor(a.index().map_err(|e| e.to_string())?, mib)?;
    report_floor(
        &format!("d2d_migrate_p2p_{mib}M"),
        len,
        secs,
        &floor,
        "p2p_2m",
    );
    Ok(())
}

/// `msvm-tests bench-lifecycle`: pagemap create and teardown time for one
/// chunk, the time to remove every idle chunk of one device, and the
/// struct-page cost after churn: a device filled, three quarters of its
/// pages freed in a scattered pattern, then a consolidating shrink pass.
/// Prints `BENCH <name> <value> ms` and `BENCH <name> <value> %` lines.
pub fn run_lifecycle(quick: bool) -> Result<(), String> {
    use crate::lifecycle::shrink;
    let e = |x: msvm_rt::Error| x.to_string();
    // The device out of everyone's P2P reach: nobody else's pages on it.
    let (_, _, dev) = crate::multi::devices()?;
    shrink("idle")?;
    let s = dev.stats().map_err(e)?;
    if s.chunks_live != 0 {
        return Err(format!("device not empty: {} chunks live", s.chunks_live));
    }
    let chunk = s.chunk_size as usize;
    let mib = chunk >> 20;
    let time = |f: &mut dyn FnMut() -> Result<(), String>| -> Result<f64, String> {
        let t = Instant::now();
        f()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    // Create: one page into an empty device (a new pagemap), minus one page
    // into a device that has it.
    let (mut create, mut teardown, mut cold, mut warm) = (0.0, 0.0, 0.0, 0.0);
    const N: usize = 5;
    for _ in 0..N {
        let m = crate::svm::Map::new(2 * PAGE)?;
        let one = |at: usize| -> Result<(), String> {
            let out = dev
                .migrate(m.addr() + at, PAGE, Location::Device)
                .map_err(e)?;
            (out.moved == 1).then_some(()).ok_or(format!("{out:?}"))
        };
        let first = time(&mut || one(0))?;
        let second = time(&mut || one(PAGE))?;
        create += first - second;
        cold += first;
        warm += second;
        drop(m);
        teardown += time(&mut || {
            let n = shrink("idle")?;
            (n == 1).then_some(()).ok_or(format!("removed {n}"))
        })?;
    }
    println!("BENCH pagemap_create_{mib}M {:.3} ms", create / N as f64);
    // The whole latency a process sees for its first page on a device with
    // no memory set up (the chunk's memremap_pages included), and for the
    // next page.
    println!("BENCH first_touch_{mib}M {:.3} ms", cold / N as f64);
    println!("BENCH warm_touch_{mib}M {:.3} ms", warm / N as f64);
    println!(
        "BENCH pagemap_teardown_{mib}M {:.3} ms",
        teardown / N as f64
    );
    if quick {
        return Ok(());
    }
    // Every chunk of the device, idle (never-touched memory moved there and
    // unmapped: no RAM needed), removed in one pass.
    let vram = s.vram_size as usize;
    // 16 chunks of 64 MiB at most, whatever the device size: the figures
    // compare from one set-up to another.
    let quarter = (vram / 4).min(256 << 20);
    let held = fill_device(&dev, quarter)?;
    drop(held);
    let idle = dev.stats().map_err(e)?.chunks_cached;
    let ms = time(&mut || shrink("idle").map(drop))?;
    println!("BENCH shrink_idle_chunks {ms:.3} ms");
    println!("# {idle} idle chunks of {mib} MiB removed in {ms:.1} ms");
    // Churn: fill the whole device, then free 48 KiB of every 64 KiB, then
    // a consolidating pass (what the shrinker's work does under continued
    // pressure once no chunk is idle).
    let held = fill_device(&dev, quarter)?;
    for m in &held {
        for off in (0..quarter).step_by(64 << 10) {
            let p = NonNull::new((m.addr() + off + (16 << 10)) as *mut _).unwrap();
            // SAFETY: discarding part of our own mapping.
            unsafe { madvise(p, 48 << 10, MmapAdvise::MADV_DONTNEED) }
                .map_err(|x| x.to_string())?;
        }
    }
    let pct =
        |s: &msvm_rt::Stats| s.memmap_bytes as f64 * 100.0 / (s.resident * PAGE as u64) as f64;
    let before = dev.stats().map_err(e)?;
    let ms = time(&mut || shrink("all").map(drop))?;
    let after = dev.stats().map_err(e)?;
    if after.resident != before.resident {
        return Err(format!(
            "resident {} -> {}",
            before.resident, after.resident
        ));
    }
    println!("BENCH memmap_pct_before_shrink {:.3} %", pct(&before));
    println!("BENCH memmap_pct_of_resident {:.3} %", pct(&after));
    println!("BENCH shrink_consolidate {ms:.3} ms");
    println!(
        "# churn: {} MiB resident in {} chunks ({} MiB of struct pages) -> {} chunks ({} MiB), \
         {} pages moved device to device in {ms:.0} ms",
        (before.resident * PAGE as u64) >> 20,
        before.chunks_live,
        before.memmap_bytes >> 20,
        after.chunks_live,
        after.memmap_bytes >> 20,
        after.shrink_moved - before.shrink_moved
    );
    drop(held);
    shrink("idle")?;
    Ok(())
}

/// Four never-touched mappings of `quarter` bytes each, moved to `dev`
/// (cleared there: no RAM used): every chunk of a device of `4 * quarter`.
/// In 4 KiB pages: partly discarded 2 MiB device folios would keep all
/// their pages (no deferred split for device folios), leaving nothing to
/// consolidate.
fn fill_device(dev: &msvm_rt::Device, quarter: usize) -> Result<Vec<crate::svm::Map>, String> {
    let mut held = Vec::new();
    for _ in 0..4 {
        let m = crate::svm::Map::small(quarter)?;
        dev.migrate(m.addr(), quarter, Location::Device)
            .map_err(|x| x.to_string())?;
        held.push(m);
    }
    Ok(held)
}

/// Samples per latency distribution.
const SAMPLES: usize = 1000;

/// `p50`, `p99` and `max` of `samples` (seconds), printed as
/// `BENCH latency_<name>_{p50,p99,max}_us` lines; returns the `p50`.
fn report_latency(name: &str, samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize] * 1e6;
    println!("BENCH latency_{name}_p50_us {:.1} us", at(0.5));
    println!("BENCH latency_{name}_p99_us {:.1} us", at(0.99));
    println!("BENCH latency_{name}_max_us {:.1} us", at(1.0));
    // The distribution, for the picture: every 5th percentile.
    let cdf: Vec<String> = (0..=20)
        .map(|k| format!("{:.1}", at(f64::from(k) / 20.0)))
        .collect();
    println!("LATENCY {name} {}", cdf.join(","));
    at(0.5)
}

/// `SAMPLES` timings of `op`, each after an untimed `reset`.
fn sample(
    mut reset: impl FnMut() -> Result<(), String>,
    mut op: impl FnMut() -> Result<(), String>,
) -> Result<Vec<f64>, String> {
    let mut v = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        reset()?;
        let t = Instant::now();
        op()?;
        v.push(t.elapsed().as_secs_f64());
    }
    Ok(v)
}

/// `len` bytes of `byte` at the returned address: a 2 MiB aligned THP if
/// `large`, else 4 KiB pages; the mapping goes with the returned `Map`.
fn filled(len: usize, large: bool, byte: u8) -> Result<(crate::svm::Map, usize), String> {
    use crate::svm::Map;
    let (m, p) = if large {
        let m = Map::new(2 * HUGE)?;
        let p = m.addr().next_multiple_of(HUGE);
        (m, p)
    } else {
        let m = Map::small(len)?;
        let p = m.addr();
        (m, p)
    };
    // SAFETY: `[p, p + len)` lies in our own fresh mapping.
    unsafe { std::ptr::write_bytes(p as *mut u8, byte, len) };
    Ok((m, p))
}

/// The default attributes but the access counters, off: a range a device
/// works on in place stays where it is.
pub(crate) fn counters_off() -> msvm_rt::Attributes {
    msvm_rt::Attributes {
        preferred: msvm_rt::Place::Default,
        access: msvm_rt::Access::Migrate,
        thrash: true,
        counters: false,
        read_mostly: false,
    }
}

/// The jobs whose pages must first move to gpu0, by name: 4 KiB, 64 KiB
/// (4 KiB pages) and a 2 MiB THP (whether it is one).
const MOVES: [(&str, usize, bool); 3] = [
    ("move_4k", PAGE, false),
    ("move_64k", 64 << 10, false),
    ("move_2m", HUGE, true),
];

/// `msvm-tests bench-latency`: latency distributions of the smallest engine
/// jobs on gpu0 by where their page is (its own VRAM, its peer gpu1's over
/// P2P, system RAM by DMA), of a job whose pages must first move to gpu0
/// (4 KiB, 64 KiB, a 2 MiB folio), and of CPU faults on a 4 KiB page and on
/// a 2 MiB folio of gpu0. `BENCH latency_<path>[_checksum]_{p50,p99,max}_us`.
pub fn run_latency() -> Result<(), String> {
    use crate::svm::Map;
    use msvm_rt::Exec;
    let e = |x: msvm_rt::Error| x.to_string();
    let (a, b, _) = crate::multi::devices()?;
    let mv = |d: &msvm_rt::Device, m: usize, len: usize, to| -> Result<(), String> {
        let out = d.migrate(m, len, to).map_err(e)?;
        if out.moved + out.already != (len / PAGE) as u64 {
            return Err(format!("moved {out:?} of {} pages", len / PAGE));
        }
        Ok(())
    };
    let job = |d: &msvm_rt::Device, op: Exec, m: usize, len: usize, in_place: bool| {
        d.exec(op, m, len, in_place).map(drop).map_err(e)
    };
    let none = || Ok(());
    // In place: the page stays where it is; an 8-byte ATOMIC_ADD and a
    // 4 KiB CHECKSUM.
    let m = Map::small(PAGE)?;
    let p = m.addr();
    // The access counters would move the page to gpu0 after 256 jobs.
    a.set_attr(p, PAGE, counters_off()).map_err(e)?;
    // The p50 of each path's ATOMIC_ADD, against own VRAM's.
    let mut p50 = [0.0; 3];
    for (k, (path, home)) in [("vram", Some(&a)), ("p2p", Some(&b)), ("dma", None)]
        .into_iter()
        .enumerate()
    {
        match home {
            Some(d) => mv(d, p, PAGE, Location::Device)?,
            None => mv(&a, p, PAGE, Location::System)?,
        }
        // In place wherever it is: no placement pass, the same path for all.
        let mut s = sample(none, || job(&a, Exec::AtomicAdd(1), p, 8, true))?;
        p50[k] = report_latency(path, &mut s);
        let mut s = sample(none, || job(&a, Exec::Checksum, p, PAGE, true))?;
        report_latency(&format!("{path}_checksum"), &mut s);
    }
    println!("BENCH latency_p2p_over_own {:.2} x", p50[1] / p50[0]);
    println!("BENCH latency_dma_over_own {:.2} x", p50[2] / p50[0]);
    mv(&a, p, PAGE, Location::System)?;
    drop(m);
    // A job whose pages must first move to gpu0: CHECKSUM over 4 KiB,
    // 64 KiB (4 KiB pages) and a 2 MiB THP, sent back untimed each time.
    for (path, len, large) in MOVES {
        let (_m, p) = filled(len, large, 7)?;
        let mut s = sample(
            || mv(&a, p, len, Location::System),
            || job(&a, Exec::Checksum, p, len, false),
        )?;
        report_latency(path, &mut s);
    }
    // CPU faults on gpu0's pages: one read of a 4 KiB page (its window
    // comes back), of a 2 MiB folio (it comes back whole).
    for (path, len, large) in [("cpu_fault_4k", PAGE, false), ("cpu_fault_2m", HUGE, true)] {
        let (_m, p) = filled(len, large, 9)?;
        let mut sum = 0u64;
        let mut s = sample(
            || mv(&a, p, len, Location::Device),
            || {
                // SAFETY: reading our own mapping; volatile so it is kept.
                sum += u64::from(unsafe { std::ptr::read_volatile(p as *const u8) });
                Ok(())
            },
        )?;
        if sum != 9 * SAMPLES as u64 {
            return Err(format!("{path}: read {sum}"));
        }
        report_latency(path, &mut s);
    }
    Ok(())
}

/// `msvm-tests bench-oversub MODE` (msvm loaded with `evict=` the policy
/// `MODE` names: `off`, `lru` or `on`): on the isolated device (256 MiB in
/// `make bench`'s placement boot), a 128 MiB working set placed by MIGRATE
/// is CHECKSUMmed 10 times, each time after the CPU writes 256 MiB of fresh
/// data that a CHECKSUM then streams through the same device. Prints the
/// share of the working set's bytes the engine read from its own VRAM
/// without moving them there first (`oversub_hot_hit_pct.MODE`), the blocks
/// evicted and the time, as BENCH lines. Every checksum must match the
/// CPU's.
pub fn run_oversub(mode: &str) -> Result<(), String> {
    const MIB: usize = 1 << 20;
    const HOT: usize = 128 * MIB;
    const STREAM: usize = 256 * MIB;
    const ROUNDS: u64 = 10;
    let (_, _, dev) = crate::multi::devices()?;
    let e = |x: msvm_rt::Error| x.to_string();
    let hot = buffer(HOT)?;
    for (i, w) in hot.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    let bytes = |b: &[u64]| -> u64 {
        // SAFETY: the same memory, viewed as bytes.
        msvm_rt::checksum(unsafe { std::slice::from_raw_parts(b.as_ptr().cast(), b.len() * 8) })
    };
    let want_hot = bytes(hot);
    let stream = buffer(STREAM)?;
    dev.migrate(hot.as_ptr() as usize, HOT, Location::Device)
        .map_err(e)?;
    let s0 = dev.stats().map_err(e)?;
    let (mut hit, t) = (0u64, Instant::now());
    for round in 0..ROUNDS {
        // Fresh data, written by the CPU (its pages on the device, if any,
        // fault back first).
        for (i, w) in stream.iter_mut().enumerate() {
            *w = (i as u64 ^ round).wrapping_mul(0xd6e8_feb8_6659_fd93);
        }
        let want = bytes(stream);
        let got = dev
            .exec(Exec::Checksum, stream.as_ptr() as usize, STREAM, false)
            .map_err(e)?;
        if got.result != want {
            return Err(format!("round {round}: stream checksum"));
        }
        let a = dev.stats().map_err(e)?;
        let got = dev
            .exec(Exec::Checksum, hot.as_ptr() as usize, HOT, false)
            .map_err(e)?;
        let b = dev.stats().map_err(e)?;
        if got.result != want_hot {
            return Err(format!("round {round}: working set checksum"));
        }
        let moved_in = (b.to_device - a.to_device) * PAGE as u64;
        hit += (b.engine_vram_read - a.engine_vram_read).saturating_sub(moved_in);
    }
    let secs = t.elapsed().as_secs_f64();
    let s1 = dev.stats().map_err(e)?;
    println!(
        "BENCH oversub_hot_hit_pct.{mode} {:.1} %",
        hit as f64 * 100.0 / (ROUNDS as f64 * HOT as f64)
    );
    println!(
        "BENCH oversub_evict_blocks.{mode} {} blocks",
        s1.evict_blocks - s0.evict_blocks
    );
    println!(
        "BENCH oversub_no_vram_mib.{mode} {} MiB",
        (s1.no_vram - s0.no_vram) * PAGE as u64 / MIB as u64
    );
    println!("BENCH oversub_s.{mode} {secs:.3} s");
    // SAFETY: from `buffer`, and used no more.
    unsafe {
        unmap(hot)?;
        unmap(stream)?;
    }
    run_oversub_shift(&dev, mode)?;
    run_oversub_cyclic(&dev, mode)
}

/// Jobs of the oversubscription cases below: a runtime working through a
/// large set in batches.
const OVERSUB_JOB: usize = 32 << 20;

/// `len` bytes of fresh memory filled by the CPU, and the checksum of each
/// [`OVERSUB_JOB`] of it.
fn oversub_set(len: usize, seed: u64) -> Result<(&'static mut [u64], Vec<u64>), String> {
    let b = buffer(len)?;
    for (i, w) in b.iter_mut().enumerate() {
        *w = (i as u64 ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    // SAFETY: the same memory, viewed as bytes.
    let bytes = unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u8>(), len) };
    let sums = bytes.chunks(OVERSUB_JOB).map(msvm_rt::checksum).collect();
    Ok((b, sums))
}

/// One round over `set` on `dev`: its jobs in order, each checked; the
/// bytes read from the device's memory without moving them there first.
fn oversub_round(dev: &Device, set: &[u64], sums: &[u64]) -> Result<u64, String> {
    let e = |x: msvm_rt::Error| x.to_string();
    let a = dev.stats().map_err(e)?;
    for (k, want) in sums.iter().enumerate() {
        let len = (set.len() * 8 - k * OVERSUB_JOB).min(OVERSUB_JOB);
        let got = dev
            .exec(
                Exec::Checksum,
                set.as_ptr() as usize + k * OVERSUB_JOB,
                len,
                false,
            )
            .map_err(e)?;
        if got.result != *want {
            return Err(format!("job {k}: checksum"));
        }
    }
    let b = dev.stats().map_err(e)?;
    let moved_in = (b.to_device - a.to_device) * PAGE as u64;
    Ok((b.engine_vram_read - a.engine_vram_read).saturating_sub(moved_in))
}

/// Prints the BENCH lines of oversubscription case `case` in `mode`: the
/// share read from VRAM, and the blocks evicted, the refaults and the time
/// between `s0` and `s1`.
fn report_oversub(case: &str, mode: &str, pct: f64, (s0, s1): (&Stats, &Stats), secs: f64) {
    println!("BENCH oversub_{case}_hit_pct.{mode} {pct:.1} %");
    println!(
        "BENCH oversub_{case}_evict_blocks.{mode} {} blocks",
        s1.evict_blocks - s0.evict_blocks
    );
    println!(
        "BENCH oversub_{case}_refaults.{mode} {} blocks",
        s1.evict_refaults - s0.evict_refaults
    );
    println!("BENCH oversub_{case}_s.{mode} {secs:.3} s");
}

/// A working set that shifts (part of `bench-oversub`): set A, 2/3 of the
/// device (room for 1.5 sets), read 10 rounds in 32 MiB jobs, then set B,
/// as large, 10 rounds. Prints the share of B's bytes read from VRAM
/// without moving them, from its third round on
/// (`oversub_shift_hit_pct.MODE`), the blocks evicted, the refaults and
/// the time.
fn run_oversub_shift(dev: &Device, mode: &str) -> Result<(), String> {
    const ROUNDS: usize = 10;
    let e = |x: msvm_rt::Error| x.to_string();
    let s0 = dev.stats().map_err(e)?;
    let len = (s0.vram_size as usize * 2 / 3) & !(HUGE - 1);
    let (a, sums_a) = oversub_set(len, 1)?;
    let (b, sums_b) = oversub_set(len, 2)?;
    let t = Instant::now();
    for _ in 0..ROUNDS {
        oversub_round(dev, a, &sums_a)?;
    }
    let mut hit = 0;
    for round in 0..ROUNDS {
        let h = oversub_round(dev, b, &sums_b)?;
        if round >= 2 {
            hit += h;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let s1 = dev.stats().map_err(e)?;
    let pct = hit as f64 * 100.0 / ((ROUNDS - 2) as f64 * len as f64);
    report_oversub("shift", mode, pct, (&s0, &s1), secs);
    // SAFETY: from `buffer`, and used no more.
    unsafe {
        unmap(a)?;
        unmap(b)
    }
}

/// A cycle larger than the device (part of `bench-oversub`): one set, 1.5
/// times the device, read in order in 32 MiB jobs, 10 rounds. Prints the
/// share of its bytes read from VRAM without moving them, from the second
/// round on (`oversub_cyclic_hit_pct.MODE`), the blocks evicted, the
/// refaults and the time. Plain LRU evicts each block just before its
/// next use.
fn run_oversub_cyclic(dev: &Device, mode: &str) -> Result<(), String> {
    const ROUNDS: usize = 10;
    let e = |x: msvm_rt::Error| x.to_string();
    let s0 = dev.stats().map_err(e)?;
    let len = (s0.vram_size as usize * 3 / 2) & !(HUGE - 1);
    let (set, sums) = oversub_set(len, 3)?;
    let t = Instant::now();
    let mut hit = 0;
    for round in 0..ROUNDS {
        let h = oversub_round(dev, set, &sums)?;
        if round >= 1 {
            hit += h;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let s1 = dev.stats().map_err(e)?;
    let pct = hit as f64 * 100.0 / ((ROUNDS - 1) as f64 * len as f64);
    report_oversub("cyclic", mode, pct, (&s0, &s1), secs);
    // SAFETY: from `buffer`, and used no more.
    unsafe { unmap(set) }
}

/// `msvm-tests bench-pingpong MODE` (msvm loaded with `thrash=0` for
/// `off`, the default for `on`): the CPU writes a 64 MiB buffer, gpu0 adds
/// 1 to every word of it (a job, migrate-on-access), 50 rounds; then every
/// word is checked. Prints the time and the bytes migrated either way.
pub fn run_pingpong(mode: &str) -> Result<(), String> {
    const LEN: usize = 64 << 20;
    const ROUNDS: u64 = 50;
    let dev = gpu0()?;
    let e = |x: msvm_rt::Error| x.to_string();
    let buf = buffer(LEN)?;
    let s0 = dev.stats().map_err(e)?;
    let t = Instant::now();
    for round in 0..ROUNDS {
        buf.fill(round);
        dev.exec(Exec::AtomicAdd(1), buf.as_ptr() as usize, LEN, false)
            .map_err(e)?;
    }
    let secs = t.elapsed().as_secs_f64();
    let s1 = dev.stats().map_err(e)?;
    if let Some(i) = buf.iter().position(|&w| w != ROUNDS) {
        return Err(format!("word {i} is {}, want {ROUNDS}", buf[i]));
    }
    let moved = (s1.to_device - s0.to_device + s1.to_system - s0.to_system) * PAGE as u64;
    println!("BENCH pingpong_64M.{mode} {secs:.3} s");
    println!("BENCH pingpong_64M.bytes_{mode} {moved} bytes");
    println!(
        "BENCH pingpong_64M.pinned_{mode} {} blocks",
        s1.thrash_pinned - s0.thrash_pinned
    );
    Ok(())
}

/// `msvm-tests bench-stream MODE` (as [`run_pingpong`]): the guard of the
/// thrashing policy. A 64 MiB buffer the CPU wrote is migrated to gpu0
/// once, then checksummed there 50 times; prints the time of the 50 jobs.
pub fn run_stream(mode: &str) -> Result<(), String> {
    const LEN: usize = 64 << 20;
    const ROUNDS: usize = 50;
    let dev = gpu0()?;
    let e = |x: msvm_rt::Error| x.to_string();
    let buf = buffer(LEN)?;
    for (i, w) in buf.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    // SAFETY: the same memory, viewed as bytes.
    let want = msvm_rt::checksum(unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), LEN) });
    dev.migrate(buf.as_ptr() as usize, LEN, Location::Device)
        .map_err(e)?;
    let t = Instant::now();
    for round in 0..ROUNDS {
        let got = dev
            .exec(Exec::Checksum, buf.as_ptr() as usize, LEN, false)
            .map_err(e)?;
        if got.result != want {
            return Err(format!("round {round}: checksum"));
        }
    }
    println!("BENCH stream_64M.{mode} {:.3} s", t.elapsed().as_secs_f64());
    Ok(())
}

/// `msvm-tests bench-hot-remote MODE` (msvm loaded with `access_counters=0`
/// for `off`, the default for `on`): gpu1 checksums a 64 MiB buffer that
/// lies on gpu0, in place (over P2P), 100 times; prints the time of the
/// last 10 rounds and the bytes the access counters moved. Then the buffer
/// is migrated to gpu1 and the same 10 rounds run on its own VRAM
/// (`.local`, `.local_off`). Every checksum is checked.
pub fn run_hot_remote(mode: &str) -> Result<(), String> {
    const LEN: usize = 64 << 20;
    const ROUNDS: usize = 100;
    const LAST: usize = 10;
    let (home, user, _) = crate::multi::devices()?;
    let e = |x: msvm_rt::Error| x.to_string();
    let buf = buffer(LEN)?;
    for (i, w) in buf.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 7;
    }
    // SAFETY: the same memory, viewed as bytes.
    let want = msvm_rt::checksum(unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), LEN) });
    let addr = buf.as_ptr() as usize;
    home.migrate(addr, LEN, Location::Device).map_err(e)?;
    let rounds = |n: usize| -> Result<f64, String> {
        let mut last = 0.0;
        for round in 0..n {
            let t = Instant::now();
            let got = user.exec(Exec::Checksum, addr, LEN, true).map_err(e)?;
            if round + LAST >= n {
                last += t.elapsed().as_secs_f64();
            }
            if got.result != want {
                return Err(format!("round {round}: checksum"));
            }
        }
        Ok(last)
    };
    let s0 = user.stats().map_err(e)?;
    let remote = rounds(ROUNDS)?;
    let s1 = user.stats().map_err(e)?;
    user.migrate(addr, LEN, Location::Device).map_err(e)?;
    let local = rounds(LAST)?;
    println!("BENCH hot_remote_64M.{mode} {remote:.3} s");
    let suffix = if mode == "on" { "" } else { "_off" };
    println!("BENCH hot_remote_64M.local{suffix} {local:.3} s");
    println!(
        "BENCH hot_remote_64M.moved_{mode} {} bytes",
        (s1.access_moved - s0.access_moved) * PAGE as u64
    );
    println!(
        "BENCH hot_remote_64M.p2p_read_{mode} {} bytes",
        s1.engine_p2p_read - s0.engine_p2p_read
    );
    Ok(())
}

/// `msvm-tests bench-read-shared`: gpu0, gpu1 and the device out of their
/// P2P reach each CHECKSUM the same 64 MiB of read-only "weights" 20
/// times, interleaved, while the CPU reads them too (a word of every page
/// each round); in the middle the CPU writes them once (writable for the
/// write, read-only again). First with the range read-mostly on every
/// device (`read_shared_64M.on`: replicas), then, each on a fresh buffer,
/// with migrate-on-access alone (`.migrate`: thrashing detection off for
/// the range) and with the default attributes (`.default`: migrate-on-
/// access, with thrashing detection, which pins the weights in system RAM
/// after a few rounds). Every checksum must match the CPU's; after the
/// write no replica may be left, and the next reads must see the new
/// bytes.
pub fn run_read_shared() -> Result<(), String> {
    use msvm_rt::{Access, Attributes, Place};
    use nix::sys::mman::{mprotect, ProtFlags};
    const LEN: usize = 64 << 20;
    const ROUNDS: usize = 20;
    let e = |x: msvm_rt::Error| x.to_string();
    let (a, b, c) = crate::multi::devices()?;
    let devs = [&a, &b, &c];
    let protect = |buf: &[u64], prot| {
        let p = NonNull::new(buf.as_ptr() as *mut std::ffi::c_void).ok_or("null")?;
        // SAFETY: our own mapping; no reference to it is used while it
        // changes.
        unsafe { mprotect(p, LEN, prot) }.map_err(|x| x.to_string())
    };
    for mode in ["on", "migrate", "default"] {
        let buf = buffer(LEN)?;
        let write = |buf: &mut [u64], seed: u64| {
            for (i, w) in buf.iter_mut().enumerate() {
                *w = (i as u64 ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            }
        };
        write(buf, 1);
        // SAFETY: the same memory, viewed as bytes.
        let bytes = |buf: &[u64]| unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), LEN) };
        let mut want = msvm_rt::checksum(bytes(buf));
        protect(buf, ProtFlags::PROT_READ)?;
        let addr = buf.as_ptr() as usize;
        let attrs = Attributes {
            preferred: Place::Default,
            access: Access::Migrate,
            thrash: mode != "migrate",
            counters: true,
            read_mostly: mode == "on",
        };
        for d in devs {
            d.set_attr(addr, LEN, attrs).map_err(e)?;
        }
        let s0: Vec<msvm_rt::Stats> = devs
            .iter()
            .map(|d| d.stats())
            .collect::<Result<_, _>>()
            .map_err(e)?;
        let mut secs = 0.0;
        let mut sum = 0u64;
        for round in 0..ROUNDS {
            if round == ROUNDS / 2 {
                protect(buf, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE)?;
                let t = Instant::now();
                write(buf, 2);
                secs += t.elapsed().as_secs_f64();
                protect(buf, ProtFlags::PROT_READ)?;
                want = msvm_rt::checksum(bytes(buf));
                for d in devs {
                    let r = d.residency(addr, LEN).map_err(e)?;
                    if r.replicas.iter().any(|&n| n != 0) {
                        return Err(format!("{mode}: replicas left after the write: {r:?}"));
                    }
                }
            }
            let t = Instant::now();
            for (k, d) in devs.into_iter().enumerate() {
                let got = d.exec(Exec::Checksum, addr, LEN, false).map_err(e)?;
                if got.result != want {
                    return Err(format!("{mode}: round {round}, device {k}: checksum"));
                }
            }
            for w in buf.iter().step_by(PAGE / 8) {
                // SAFETY: reading our own mapping; volatile so it is kept.
                sum = sum.wrapping_add(unsafe { std::ptr::read_volatile(w) });
            }
            secs += t.elapsed().as_secs_f64();
        }
        let mut moved = 0;
        let mut copied = 0;
        // Where the jobs spent their time: placement, walk, binding
        // (replicas are copied there), execution; in microseconds.
        let mut phase = [0u64; 4];
        for (k, d) in devs.into_iter().enumerate() {
            let s = d.stats().map_err(e)?;
            moved += s.to_device - s0[k].to_device + s.to_system - s0[k].to_system;
            copied += s.replica_copied - s0[k].replica_copied;
            phase[0] += s.job_place_us - s0[k].job_place_us;
            phase[1] += s.job_walk_us - s0[k].job_walk_us;
            phase[2] += s.job_bind_us - s0[k].job_bind_us;
            phase[3] += s.job_exec_us - s0[k].job_exec_us;
        }
        for (name, us) in ["place", "walk", "bind", "exec"].into_iter().zip(phase) {
            println!(
                "BENCH read_shared_64M.{name}_{mode} {:.3} s",
                us as f64 / 1e6
            );
        }
        println!("BENCH read_shared_64M.{mode} {secs:.3} s");
        println!(
            "BENCH read_shared_64M.moved_{mode} {} bytes",
            moved * PAGE as u64
        );
        println!(
            "BENCH read_shared_64M.replicated_{mode} {} bytes",
            copied * PAGE as u64
        );
        println!("# read_shared {mode}: CPU word sum {sum:#x}");
        protect(buf, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE)?;
    }
    Ok(())
}

/// Attributes with the access policy `access`, and the access counters off
/// (they would move in-place pages after 256 jobs).
fn attrs(access: msvm_rt::Access) -> msvm_rt::Attributes {
    msvm_rt::Attributes {
        preferred: msvm_rt::Place::Default,
        access,
        thrash: true,
        counters: false,
        read_mostly: false,
    }
}

/// `msvm-tests bench-devpt`: what the device page tables buy.
///
/// - `warm_job_64M.overhead`: a CHECKSUM over 64 MiB of gpu0 already
///   mapped in its VM's table, its whole time (the ioctl) over its engine
///   time (STATS `job_exec_us`), the median of 5; `.overhead_fault` the
///   same of the job that faulted it in (what every job paid before the
///   tables), `.faults` the windows the warm jobs faulted (0).
/// - `latency_fault_<path>_{first,warm}_{p50,p99,max}_us`: a 4 KiB CHECKSUM
///   on gpu0 whose page is in its own VRAM (`own`), gpu1's over P2P
///   (`p2p`), system RAM (`dma`), or must move to gpu0 first (`move_4k`,
///   `move_64k`: 64 KiB, `move_2m`: a THP): first touch (a fault: the
///   entries zapped by SET_ATTR, or the pages sent back to system RAM,
///   untimed, before each) and warm (mapped).
/// - `first_touch_64M.{faulting,prefetched}` (GiB/s): a CHECKSUM that
///   faults its way through 64 MiB of system RAM (moving it to gpu0), and
///   the PREFETCH to gpu0 then the same job; the best of 3.
/// - `invalidate_64M_{1,2,3}dev_us`: munmap of 64 MiB of system RAM mapped
///   in place (DMA) in the tables of 1, 2 and 3 devices, and `_zap_us` the
///   part of it the zapping took (STATS `pt_zap_ns`, all devices); the
///   best of 3.
pub fn run_devpt() -> Result<(), String> {
    use crate::svm::Map;
    use msvm_rt::Access;
    let e = |x: msvm_rt::Error| x.to_string();
    let (a, b, c) = crate::multi::devices()?;
    let st = |d: &msvm_rt::Device| d.stats().map_err(e);
    let len = 64 << 20;
    let pages = (len / PAGE) as u64;

    // Warm job overhead.
    let m = Map::new(len)?;
    let p = m.addr();
    let out = a.migrate(p, len, Location::Device).map_err(e)?;
    if out.moved + out.already != pages {
        return Err(format!("park: {out:?}"));
    }
    let timed = |d: &msvm_rt::Device| -> Result<(f64, f64), String> {
        let s0 = st(d)?;
        let t = Instant::now();
        d.exec(Exec::Checksum, p, len, false).map_err(e)?;
        let wall = t.elapsed().as_secs_f64();
        let s1 = st(d)?;
        Ok((wall, (s1.job_exec_us - s0.job_exec_us) as f64 * 1e-6))
    };
    let (w, x) = timed(&a)?;
    println!("BENCH warm_job_64M.overhead_fault {:.3} x", w / x);
    let f0 = st(&a)?.pt_faults;
    let mut ratios = Vec::new();
    for _ in 0..5 {
        let (w, x) = timed(&a)?;
        ratios.push(w / x);
    }
    ratios.sort_by(f64::total_cmp);
    println!("BENCH warm_job_64M.overhead {:.3} x", ratios[2]);
    println!(
        "BENCH warm_job_64M.faults {} windows",
        st(&a)?.pt_faults - f0
    );
    drop(m);

    // Fault latency, first touch and warm.
    let job = |p: usize, len: usize| a.exec(Exec::Checksum, p, len, false).map(drop).map_err(e);
    let mv = |d: &msvm_rt::Device, p: usize, len: usize, to| -> Result<(), String> {
        d.migrate(p, len, to).map(drop).map_err(e)
    };
    let none = || Ok(());
    let m = Map::small(PAGE)?;
    let p = m.addr();
    for (path, home) in [("own", Some(&a)), ("p2p", Some(&b)), ("dma", None)] {
        let access = if path == "own" {
            Access::Migrate
        } else {
            Access::InPlace
        };
        a.set_attr(p, PAGE, attrs(access)).map_err(e)?;
        match home {
            Some(d) => mv(d, p, PAGE, Location::Device)?,
            None => mv(&a, p, PAGE, Location::System)?,
        }
        // SET_ATTR zaps the range's entries, and moves nothing.
        let zap = || a.set_attr(p, PAGE, attrs(access)).map_err(e);
        let f0 = st(&a)?.pt_faults;
        let mut s = sample(zap, || job(p, PAGE))?;
        if st(&a)?.pt_faults - f0 != SAMPLES as u64 {
            return Err(format!("{path}: a first touch did not fault"));
        }
        report_latency(&format!("fault_{path}_first"), &mut s);
        let h0 = st(&a)?.pt_hits;
        let mut s = sample(none, || job(p, PAGE))?;
        if st(&a)?.pt_hits - h0 != SAMPLES as u64 {
            return Err(format!("{path}: a warm job faulted"));
        }
        report_latency(&format!("fault_{path}_warm"), &mut s);
    }
    a.set_attr(p, PAGE, attrs(Access::Migrate)).map_err(e)?;
    mv(&a, p, PAGE, Location::System)?;
    drop(m);
    for (path, len, large) in MOVES {
        let (_m, p) = filled(len, large, 7)?;
        let mut s = sample(|| mv(&a, p, len, Location::System), || job(p, len))?;
        report_latency(&format!("fault_{path}_first"), &mut s);
        let mut s = sample(none, || job(p, len))?;
        report_latency(&format!("fault_{path}_warm"), &mut s);
    }

    // First touch of 64 MiB: faulting, and prefetched.
    let best = |mut f: Box<dyn FnMut() -> Result<f64, String> + '_>| -> Result<f64, String> {
        let mut v = f64::INFINITY;
        for _ in 0..3 {
            v = v.min(f()?);
        }
        Ok(v)
    };
    let (m, p) = filled(len, false, 3)?;
    let faulting = best(Box::new(|| {
        mv(&a, p, len, Location::System)?;
        let t = Instant::now();
        job(p, len)?;
        Ok(t.elapsed().as_secs_f64())
    }))?;
    let prefetched = best(Box::new(|| {
        mv(&a, p, len, Location::System)?;
        let t = Instant::now();
        a.prefetch(p, len, msvm_rt::Place::Here).map_err(e)?;
        job(p, len)?;
        Ok(t.elapsed().as_secs_f64())
    }))?;
    println!(
        "BENCH first_touch_64M.faulting {:.3} GiB/s",
        gibps(len, faulting)
    );
    println!(
        "BENCH first_touch_64M.prefetched {:.3} GiB/s",
        gibps(len, prefetched)
    );
    mv(&a, p, len, Location::System)?;
    drop(m);

    // Invalidation of 64 MiB mapped on 1, 2, 3 devices.
    for n in 1..=3 {
        let devs = [&a, &b, &c];
        let (mut us, mut zap_us) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..3 {
            let (m, p) = filled(len, false, 5)?;
            for d in &devs[..n] {
                d.set_attr(p, len, attrs(Access::InPlace)).map_err(e)?;
                d.exec(Exec::Checksum, p, len, false).map_err(e)?;
            }
            let zapped = |f: fn(&msvm_rt::Stats) -> u64| -> Result<u64, String> {
                devs[..n].iter().map(|d| st(d).map(|s| f(&s))).sum()
            };
            let (z0, ns0) = (zapped(|s| s.pt_zapped)?, zapped(|s| s.pt_zap_ns)?);
            let t = Instant::now();
            drop(m);
            us = us.min(t.elapsed().as_secs_f64() * 1e6);
            let (z1, ns1) = (zapped(|s| s.pt_zapped)?, zapped(|s| s.pt_zap_ns)?);
            if z1 - z0 != pages * n as u64 {
                return Err(format!("{n} devices: {} entries zapped", z1 - z0));
            }
            zap_us = zap_us.min((ns1 - ns0) as f64 * 1e-3);
        }
        println!("BENCH invalidate_64M_{n}dev_us {us:.1} us");
        println!("BENCH invalidate_64M_{n}dev_zap_us {zap_us:.1} us");
    }
    Ok(())
}

/// `msvm-tests bench-scale`: independent work on independent devices does
/// not serialise. A worker process parks 64 MiB in its device's memory and
/// runs 8 CHECKSUMs over it (every page mapped: no fault, no move). One
/// worker on gpu0 alone, then two at once, on gpu0 and the isolated
/// device, each as much work; timed from the moment every worker is ready.
/// Prints `scale_2proc_2dev.speedup` (twice the one's time over the
/// two's: 2 is perfect, with the guest's 2 vCPUs) and the times, best of 3
/// rounds each.
pub fn run_scale() -> Result<(), String> {
    let locks = || std::fs::read_to_string("/sys/kernel/debug/msvm/locks").unwrap_or_default();
    let mut one = f64::MAX;
    let mut two = f64::MAX;
    let mut contention = (String::new(), String::new());
    for _ in 0..3 {
        one = one.min(scale_round(&[0])?);
        let before = locks();
        two = two.min(scale_round(&[0, 2])?);
        contention = (before, locks());
    }
    // The global locks during the last two-process round.
    print_lock_contention("scale_2proc_2dev", &contention.0, &contention.1);
    println!("BENCH scale_2proc_2dev.speedup {:.2} x", 2.0 * one / two);
    println!("BENCH scale_1proc_1dev_s {one:.3} s");
    println!("BENCH scale_2proc_2dev_s {two:.3} s");
    Ok(())
}

/// Runs one worker per device role in `roles` (0: gpu0, 2: the isolated
/// device) at once; the seconds from their start to the last one's end of
/// its jobs.
fn scale_round(roles: &[usize]) -> Result<f64, String> {
    use nix::sys::signal::{kill, Signal};
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, pipe, read, write, ForkResult};
    use std::os::fd::{AsFd, OwnedFd};
    // Each worker's pipes: it says `r` (ready), then `d` (done), on its
    // own `up` pipe, whose only write end it holds (a worker that dies
    // ends it: the parent's read fails rather than waits); the parent says
    // go on its `go` pipe.
    let mut kids = Vec::new();
    let mut ends: Vec<(OwnedFd, OwnedFd)> = Vec::new();
    let mut run = || -> Result<f64, String> {
        for &role in roles {
            let (up_r, up_w) = pipe().map_err(|e| e.to_string())?;
            let (go_r, go_w) = pipe().map_err(|e| e.to_string())?;
            // SAFETY: the bench is single-threaded here; the child only
            // runs its worker and exits.
            match unsafe { fork() }.map_err(|e| e.to_string())? {
                ForkResult::Child => {
                    // Only its own ends: the parent's (and earlier
                    // workers') go ends closed here, a `go` read finds the
                    // end if the parent dies.
                    drop((up_r, go_w, std::mem::take(&mut ends)));
                    let ok = scale_worker(role, &up_w, &go_r).is_ok();
                    std::process::exit(if ok { 0 } else { 1 });
                }
                ForkResult::Parent { child } => {
                    kids.push(child);
                    drop((up_w, go_r));
                    ends.push((up_r, go_w));
                }
            }
        }
        let want = |c: u8| -> Result<(), String> {
            for (up, _) in &ends {
                let mut b = [0u8; 1];
                let n = read(up.as_fd(), &mut b).map_err(|e| e.to_string())?;
                if n != 1 || b[0] != c {
                    return Err(format!("a worker failed (wanted {:?})", c as char));
                }
            }
            Ok(())
        };
        want(b'r')?;
        let t = Instant::now();
        for (_, go) in &ends {
            write(go.as_fd(), b"g").map_err(|e| e.to_string())?;
        }
        want(b'd')?;
        Ok(t.elapsed().as_secs_f64())
    };
    let out = run();
    if out.is_err() {
        for &k in &kids {
            let _ = kill(k, Signal::SIGKILL);
        }
    }
    let mut failed = false;
    for k in kids {
        failed |= !matches!(waitpid(k, None), Ok(WaitStatus::Exited(_, 0)));
    }
    let secs = out?;
    if failed {
        return Err("a worker failed".into());
    }
    Ok(secs)
}

/// A worker of [`scale_round`]: parks 64 MiB on its device (every page
/// moved), runs a CHECKSUM to map it, says it is ready, waits for the
/// start, runs its 8 CHECKSUMs (each checked), says it is done.
fn scale_worker(
    role: usize,
    up: &impl std::os::fd::AsFd,
    go: &impl std::os::fd::AsFd,
) -> Result<(), String> {
    use nix::unistd::{read, write};
    let e = |x: msvm_rt::Error| x.to_string();
    let (a, _, c) = crate::multi::devices()?;
    let dev = if role == 0 { a } else { c };
    let len = 64 << 20;
    let buf = buffer(len)?;
    for (i, w) in buf.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    // SAFETY: the same memory, viewed as bytes.
    let want = msvm_rt::checksum(unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), len) });
    let p = buf.as_ptr() as usize;
    let out = dev.migrate(p, len, Location::Device).map_err(e)?;
    if out.moved != (len / PAGE) as u64 {
        return Err(format!("park: {out:?}"));
    }
    // Once, to map every page.
    dev.exec(Exec::Checksum, p, len, false).map_err(e)?;
    write(up.as_fd(), b"r").map_err(|x| x.to_string())?;
    let mut byte = [0u8; 1];
    if read(go.as_fd(), &mut byte).map_err(|x| x.to_string())? != 1 {
        return Err("no start".into());
    }
    for _ in 0..8 {
        let got = dev.exec(Exec::Checksum, p, len, false).map_err(e)?;
        if got.result != want {
            return Err("checksum".into());
        }
    }
    write(up.as_fd(), b"d").map_err(|x| x.to_string())?;
    Ok(())
}

/// The best (least) of `rounds` timings of `f`, in seconds.
fn best_of(rounds: usize, mut f: impl FnMut() -> Result<f64, String>) -> Result<f64, String> {
    let mut v = f64::INFINITY;
    for _ in 0..rounds {
        v = v.min(f()?);
    }
    Ok(v)
}

/// The first `n` bound GPUs, each opened with a VM.
fn open_gpus(n: usize) -> Result<Vec<(crate::sysfs::SysGpu, Device)>, String> {
    let gpus = crate::sysfs::msvm_gpus()?;
    if gpus.len() < n {
        return Err(format!("{} GPUs bound, want {n}", gpus.len()));
    }
    gpus.into_iter()
        .take(n)
        .map(|g| {
            let d = Device::open(&g.node).map_err(|e| e.to_string())?;
            d.vm_create().map_err(|e| e.to_string())?;
            Ok((g, d))
        })
        .collect()
}

/// Seconds one round of `op` takes over the first `n` GPUs (best of 3).
fn scale_op(op: &str, n: usize) -> Result<f64, String> {
    let e = |x: msvm_rt::Error| x.to_string();
    let gpus = open_gpus(n)?;
    match op {
        // 200 QUERYs (STATS) of each device.
        "query" | "stats" => best_of(3, || {
            let t = Instant::now();
            for _ in 0..200 {
                for (_, d) in &gpus {
                    if op == "query" {
                        d.query().map_err(e)?;
                    } else {
                        d.stats().map_err(e)?;
                    }
                }
            }
            Ok(t.elapsed().as_secs_f64())
        }),
        // 20 times: open each device and create a VM (closed after).
        "vm_create" => best_of(3, || {
            let t = Instant::now();
            for _ in 0..20 {
                for (g, _) in &gpus {
                    let d = Device::open(&g.node).map_err(e)?;
                    d.vm_create().map_err(e)?;
                }
            }
            Ok(t.elapsed().as_secs_f64())
        }),
        // munmap of 64 MiB mapped in every device's table (used in place).
        "invalidate" => best_of(3, || {
            let len = 64 << 20;
            let (m, p) = filled(len, false, 9)?;
            for (_, d) in &gpus {
                d.set_attr(p, len, attrs(msvm_rt::Access::InPlace))
                    .map_err(e)?;
                d.exec(Exec::Checksum, p, len, false).map_err(e)?;
            }
            let t = Instant::now();
            drop(m);
            Ok(t.elapsed().as_secs_f64())
        }),
        // Each device unbound from msvm (its memory empty) and bound again.
        "unplug" => {
            let addrs: Vec<String> = gpus.iter().map(|(g, _)| g.addr.clone()).collect();
            drop(gpus);
            best_of(3, || {
                let drv = "/sys/bus/pci/drivers/msvm";
                let t = Instant::now();
                for a in &addrs {
                    std::fs::write(format!("{drv}/unbind"), a)
                        .map_err(|x| format!("unbind {a}: {x}"))?;
                }
                let took = t.elapsed().as_secs_f64();
                for a in &addrs {
                    std::fs::write(format!("{drv}/bind"), a)
                        .map_err(|x| format!("bind {a}: {x}"))?;
                }
                // Its render nodes back before the next round.
                let start = Instant::now();
                loop {
                    let bound: Vec<String> = crate::sysfs::msvm_gpus()?
                        .into_iter()
                        .map(|g| g.addr)
                        .collect();
                    if addrs.iter().all(|a| bound.contains(a)) {
                        break;
                    }
                    if start.elapsed().as_secs() >= 30 {
                        return Err("the unbound GPUs did not come back within 30 s".into());
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Ok(took)
            })
        }
        _ => Err(format!("no scale op {op}")),
    }
}

/// `msvm-tests bench-scale8`, on the 8-GPU server (`scripts/vm.py --gpus
/// 8gpu`): the cost of QUERY, VM creation, an invalidation (munmap of
/// 64 MiB mapped on every device), STATS and unplug (unbind) on 3 devices
/// and on all 8, as `scale_<op>.growth` = (cost with 8 / 8) over (cost
/// with 3 / 3): 1 when a device's share does not grow with the devices.
/// Also the policies' memory per 2 MiB block (debugfs `policy`) and the
/// global locks' contention over the run (debugfs `locks`).
pub fn run_scale8() -> Result<(), String> {
    let locks = || std::fs::read_to_string("/sys/kernel/debug/msvm/locks").unwrap_or_default();
    let before = locks();
    for op in ["query", "vm_create", "invalidate", "stats", "unplug"] {
        let three = scale_op(op, 3)?;
        let eight = scale_op(op, 8)?;
        println!("BENCH scale_{op}_3dev_ms {:.3} ms", three * 1e3);
        println!("BENCH scale_{op}_8dev_ms {:.3} ms", eight * 1e3);
        println!(
            "BENCH scale_{op}.growth {:.3} x",
            (eight / 8.0) / (three / 3.0)
        );
    }
    let policy = std::fs::read_to_string("/sys/kernel/debug/msvm/policy")
        .map_err(|x| format!("debugfs policy: {x}"))?;
    let per_block = policy
        .lines()
        .find_map(|l| l.strip_prefix("bytes_per_block "))
        .ok_or("debugfs policy: no bytes_per_block")?;
    println!("BENCH policy_bytes_per_block {per_block} bytes");
    print_lock_contention("scale8", &before, &locks());
    Ok(())
}

/// Prints each global lock's acquisitions and contended ones between two
/// reads of debugfs `locks`, as `<run>_lock_<name>_{acquired,contended}`.
fn print_lock_contention(run: &str, before: &str, after: &str) {
    let parse = |s: &str| -> Vec<(String, u64, u64)> {
        s.lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let name = f.next()?.to_string();
                let a = f.next()?.parse().ok()?;
                let c = f.next()?.parse().ok()?;
                Some((name, a, c))
            })
            .collect()
    };
    let b = parse(before);
    for (name, a, c) in parse(after) {
        let (a0, c0) = b
            .iter()
            .find(|x| x.0 == name)
            .map_or((0, 0), |x| (x.1, x.2));
        println!(
            "BENCH {run}_lock_{name}_acquired {} n",
            a.saturating_sub(a0)
        );
        println!(
            "BENCH {run}_lock_{name}_contended {} n",
            c.saturating_sub(c0)
        );
    }
}

/// One pass of a tenant over `set` on `dev` (device index `idx`) in
/// [`OVERSUB_JOB`] jobs, each checked: the bytes read, and those of them
/// the device did not hold when the pass began (RESIDENCY).
fn tenant_pass(dev: &Device, idx: usize, set: &[u64], sums: &[u64]) -> Result<(u64, u64), String> {
    let e = |x: msvm_rt::Error| x.to_string();
    let len = set.len() * 8;
    let held = dev
        .residency(set.as_ptr() as usize, len)
        .map_err(e)?
        .devices[idx];
    for (k, want) in sums.iter().enumerate() {
        let n = (len - k * OVERSUB_JOB).min(OVERSUB_JOB);
        let addr = set.as_ptr() as usize + k * OVERSUB_JOB;
        let got = dev.exec(Exec::Checksum, addr, n, false).map_err(e)?;
        if got.result != *want {
            return Err(format!("job {k}: checksum"));
        }
    }
    Ok((len as u64, (len as u64).saturating_sub(held)))
}

/// `msvm-tests bench-tenants MODE`: two tenants share gpu0, a full device,
/// each in its own dmem cgroup (`/sys/fs/cgroup/msvm_ta` and `msvm_tb`,
/// made by the guest script, with or without `dmem.low`): A reads a
/// working set of 3/4 of the device three times a round, B one of half
/// the device once a round, 8 rounds in step. Without protection A's
/// frequent reads push B's set out; with `dmem.low` each keeps what it
/// protects. Prints each's share of its bytes the device held when its
/// passes began, from its third round on (`tenants_hit_pct_{a,b}.MODE`),
/// and the smaller (`tenants_min_hit_pct.MODE`). Thrashing detection off
/// (`thrash=0`), as for the oversubscription cases.
pub fn run_tenants(mode: &str) -> Result<(), String> {
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, ForkResult};
    use std::sync::atomic::{AtomicU64, Ordering};
    const ROUNDS: usize = 8;
    let vram = gpu0()?.stats().map_err(|x| x.to_string())?.vram_size as usize;
    // Per tenant: rounds done plus one, bytes read, bytes missed.
    let shared = crate::svm::Map::shared(PAGE)?;
    // SAFETY: a shared page, aligned, that only atomics touch.
    let words = unsafe { std::slice::from_raw_parts(shared.addr() as *const AtomicU64, 6) };
    let mut kids = Vec::new();
    for (k, (cg, share, passes)) in [("msvm_ta", 3, 3), ("msvm_tb", 2, 1)]
        .into_iter()
        .enumerate()
    {
        // SAFETY: the child only runs its tenant and exits.
        match unsafe { fork() }.map_err(|x| x.to_string())? {
            ForkResult::Child => {
                let r = (|| -> Result<(), String> {
                    std::fs::write(format!("/sys/fs/cgroup/{cg}/cgroup.procs"), "0")
                        .map_err(|x| format!("{cg}: {x}"))?;
                    let dev = gpu0()?;
                    let idx = dev.query().map_err(|x| x.to_string())?.index as usize;
                    let len = (vram * share / 4) & !(HUGE - 1);
                    let (set, sums) = oversub_set(len, 11 + k as u64)?;
                    // Rounds in step: each tenant's word is its rounds
                    // done plus one (`u64::MAX`: it failed); a round
                    // starts when the other tenant has done as many (and
                    // it stays until both are done).
                    let other = &words[3 * (1 - k)];
                    let step = |n: u64| -> Result<(), String> {
                        words[3 * k].store(n, Ordering::SeqCst);
                        let t = Instant::now();
                        loop {
                            match other.load(Ordering::SeqCst) {
                                u64::MAX => return Err("the other tenant failed".into()),
                                o if o >= n => return Ok(()),
                                _ if t.elapsed().as_secs() >= 300 => {
                                    return Err(format!("the other tenant is not at step {n}"))
                                }
                                _ => std::thread::sleep(std::time::Duration::from_millis(2)),
                            }
                        }
                    };
                    step(1)?;
                    for round in 0..ROUNDS {
                        for _ in 0..passes {
                            let (read, missed) = tenant_pass(&dev, idx, set, &sums)?;
                            if round >= 2 {
                                words[3 * k + 1].fetch_add(read, Ordering::SeqCst);
                                words[3 * k + 2].fetch_add(missed, Ordering::SeqCst);
                            }
                        }
                        step(round as u64 + 2)?;
                    }
                    Ok(())
                })();
                if let Err(x) = &r {
                    // The other tenant stops waiting for this one.
                    words[3 * k].store(u64::MAX, Ordering::SeqCst);
                    println!("# tenant {cg}: {x}");
                }
                std::process::exit(i32::from(r.is_err()));
            }
            ForkResult::Parent { child } => kids.push(child),
        }
    }
    let t = Instant::now();
    let mut failed = 0;
    for c in kids {
        if !matches!(waitpid(c, None), Ok(WaitStatus::Exited(_, 0))) {
            failed += 1;
        }
    }
    if failed > 0 {
        return Err(format!("{failed} tenants failed"));
    }
    let pct = |k: usize| {
        let read = words[3 * k + 1].load(Ordering::SeqCst) as f64;
        let missed = words[3 * k + 2].load(Ordering::SeqCst) as f64;
        100.0 * (read - missed).max(0.0) / read.max(1.0)
    };
    let (a, b) = (pct(0), pct(1));
    println!("BENCH tenants_hit_pct_a.{mode} {a:.1} %");
    println!("BENCH tenants_hit_pct_b.{mode} {b:.1} %");
    println!("BENCH tenants_min_hit_pct.{mode} {:.1} %", a.min(b));
    println!("BENCH tenants_s.{mode} {:.3} s", t.elapsed().as_secs_f64());
    Ok(())
}
