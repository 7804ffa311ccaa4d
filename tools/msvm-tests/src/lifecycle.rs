//! Pagemap lifecycle: chunks cached when idle, removed by a shrink pass,
//! lightly used chunks emptied into fuller ones with their data intact, and
//! the shrinker at work under real memory pressure.

use std::ptr::NonNull;

use msvm_rt::{Device, Exec, Location, Stats};
use nix::sys::mman::{madvise, MmapAdvise};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm::{every_gpu_with_vm, fill, gpu0, Map, PAGE};

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "lifecycle_idle_chunks_cached_then_removed",
            run: idle_chunks,
        },
        Test {
            name: "lifecycle_consolidation_keeps_data",
            run: consolidation,
        },
        Test {
            name: "lifecycle_copy_floor_copies_through_real_pages",
            run: copy_floor,
        },
    ]
}

const SHRINK: &str = "/sys/kernel/debug/msvm/shrink";

/// Runs a shrink pass through debugfs (`idle` or `all`); returns the
/// pagemaps it removed.
pub fn shrink(level: &str) -> Result<u64, String> {
    std::fs::write(SHRINK, level).map_err(|e| format!("write {SHRINK}: {e}"))?;
    let s = std::fs::read_to_string(SHRINK).map_err(|e| format!("read {SHRINK}: {e}"))?;
    s.trim()
        .parse()
        .map_err(|e| format!("{SHRINK}: {s:?}: {e}"))
}

fn st(d: &Device) -> Result<Stats, String> {
    d.stats().map_err(|e| e.to_string())
}

/// Data through three chunks of gpu0, then back to system RAM: the chunks
/// stay, cached (idle); a shrink pass removes them and their struct pages;
/// the next migration creates pagemaps again and the data is right.
fn idle_chunks() -> Outcome {
    let dev = gpu0()?;
    shrink("idle")?;
    let s0 = st(&dev)?;
    check!(s0.chunks_cached == 0, "idle chunks after a pass: {s0:?}");
    let chunk = s0.chunk_size as usize;
    let len = 2 * chunk + chunk / 2;
    let mut m = Map::new(len)?;
    fill(m.bytes_mut(), 4242);
    let want = m.bytes().to_vec();
    let out = dev
        .migrate(m.addr(), len, Location::Device)
        .map_err(|e| e.to_string())?;
    check!(out.moved == (len / PAGE) as u64, "to device: {out:?}");
    let s1 = st(&dev)?;
    let per = s1.memmap_bytes / s1.chunks_live.max(1);
    check!(
        per == (chunk / PAGE * 64) as u64,
        "struct pages per chunk: {per}"
    );
    dev.migrate(m.addr(), len, Location::System)
        .map_err(|e| e.to_string())?;
    let s2 = st(&dev)?;
    check!(
        s2.chunks_live == s1.chunks_live && s2.chunks_cached >= 3,
        "after going back: live {} cached {}",
        s2.chunks_live,
        s2.chunks_cached
    );
    let removed = shrink("idle")?;
    let s3 = st(&dev)?;
    check!(
        removed >= s2.chunks_cached && s3.chunks_cached == 0,
        "removed {removed}, cached now {}",
        s3.chunks_cached
    );
    check!(
        s3.chunks_live == s2.chunks_live - s2.chunks_cached,
        "live {} -> {}",
        s2.chunks_live,
        s3.chunks_live
    );
    check!(
        s3.chunks_destroyed - s2.chunks_destroyed == s2.chunks_cached
            && s3.shrink_freed - s2.shrink_freed == s2.chunks_cached * per
            && s3.memmap_bytes == s3.chunks_live * per,
        "counters: {s2:?} -> {s3:?}"
    );
    // Pagemaps come back on demand.
    dev.migrate(m.addr(), len, Location::Device)
        .map_err(|e| e.to_string())?;
    let s4 = st(&dev)?;
    check!(
        s4.chunks_created - s3.chunks_created >= 3,
        "created {}",
        s4.chunks_created - s3.chunks_created
    );
    let sum = dev
        .exec(Exec::Checksum, m.addr(), len, false)
        .map_err(|e| e.to_string())?;
    check!(sum.result == msvm_rt::checksum(&want), "device checksum");
    check!(m.bytes() == &want[..], "data changed");
    Ok(())
}

/// Three chunks filled, then three quarters of their pages freed in a
/// scattered pattern: a consolidating pass packs what is left into one
/// chunk (device to device), removes the others, and every byte left is
/// right, for the device and for the CPU. The process runs in a cgroup of
/// its own: the dmem charges follow the pages into their new chunk, and go
/// when the pages are freed. On msvm-gpu the device's copy engine moves
/// the pages (its VRAM-to-VRAM bytes are every page moved).
fn consolidation() -> Outcome {
    let dev = gpu0()?;
    let cg = crate::cgroup::Cgroup::new("msvm-test-consolidation")?;
    let region = crate::cgroup::region(&dev)?;
    cg.enter()?;
    shrink("idle")?;
    let s0 = st(&dev)?;
    let chunk = s0.chunk_size as usize;
    check!(
        s0.chunks_live == 0,
        "gpu0 must start empty: {} chunks live",
        s0.chunks_live
    );
    let len = 3 * chunk;
    // 4 KiB pages: a 2 MiB device folio partly discarded keeps all its
    // pages until it is split (the kernel has no deferred split for
    // device-private folios), which would leave nothing to consolidate.
    let mut m = Map::small(len)?;
    fill(m.bytes_mut(), 777);
    let mut want = m.bytes().to_vec();
    dev.migrate(m.addr(), len, Location::Device)
        .map_err(|e| e.to_string())?;
    let s1 = st(&dev)?;
    check!(s1.chunks_live == 3, "live {}", s1.chunks_live);
    // Free 48 KiB of every 64 KiB.
    let block = 64 * 1024;
    for off in (0..len).step_by(block) {
        let p = NonNull::new((m.addr() + off + 16 * 1024) as *mut _).unwrap();
        // SAFETY: discarding part of our own mapping.
        unsafe { madvise(p, block - 16 * 1024, MmapAdvise::MADV_DONTNEED) }
            .map_err(|e| e.to_string())?;
        want[off + 16 * 1024..off + block].fill(0);
    }
    let s2 = st(&dev)?;
    check!(
        s2.resident == (len / 4 / PAGE) as u64,
        "resident {} pages",
        s2.resident
    );
    let charged = cg.current(&region)?;
    check!(
        charged == (len / 4) as u64,
        "dmem.current {charged} before consolidation"
    );
    let index = dev.index().map_err(|e| e.to_string())?;
    let engine0 = crate::hw::counters(index)?;
    let removed = shrink("all")?;
    let s3 = st(&dev)?;
    // On msvm-gpu its copy engine moved the pages, VRAM to VRAM.
    if let (Some(a), Some(b)) = (engine0, crate::hw::counters(index)?) {
        let bytes = (s3.shrink_moved - s2.shrink_moved) * PAGE as u64;
        check!(
            // At least: a page the core backs out of after its copy is
            // copied but not counted as moved.
            b.bytes_within - a.bytes_within >= bytes && bytes > 0 && b.failed == a.failed,
            "the copy engine moved {} bytes VRAM to VRAM for {bytes}: {a:?} -> {b:?}",
            b.bytes_within - a.bytes_within
        );
    }
    check!(
        s3.chunks_live == 1 && removed == 2,
        "after consolidation: live {}, removed {removed}",
        s3.chunks_live
    );
    let moved = cg.current(&region)?;
    check!(
        moved == charged,
        "dmem.current {moved} after consolidation, {charged} before: the charges must follow the pages"
    );
    check!(
        s3.shrink_moved - s2.shrink_moved == (2 * chunk / 4 / PAGE) as u64
            && s3.shrink_home == s2.shrink_home
            && s3.resident == s2.resident,
        "moved {} to system {} resident {}",
        s3.shrink_moved - s2.shrink_moved,
        s3.shrink_home - s2.shrink_home,
        s3.resident
    );
    let pct = s3.memmap_bytes as f64 * 100.0 / (s3.resident * PAGE as u64) as f64;
    check!(
        s3.memmap_bytes * 1000 < 25 * s3.resident * PAGE as u64,
        "struct pages {pct:.2}% of resident"
    );
    // The device reads the moved pages where they are now.
    let sum = dev
        .exec(Exec::Checksum, m.addr(), len, true)
        .map_err(|e| e.to_string())?;
    check!(
        sum.result == msvm_rt::checksum(&want),
        "device checksum after consolidation"
    );
    if let Some(i) = m.bytes().iter().zip(&want).position(|(a, b)| a != b) {
        return Err(format!("byte {i} (page {}) differs", i / PAGE));
    }
    // The device pages read by the CPU came home: their charges went.
    let after = cg.current(&region)?;
    let left = st(&dev)?.resident * PAGE as u64;
    check!(
        after == left,
        "dmem.current {after} with {left} bytes still on gpu0"
    );
    drop(m);
    check!(
        cg.current(&region)? == 0,
        "dmem.current {} after munmap",
        cg.current(&region)?
    );
    crate::cgroup::leave()
}

/// `msvm-tests pressure`: every device gets idle chunks, then a child
/// process takes memory until the kernel reclaims; the shrinker must remove
/// the idle chunks (the counters and MemAvailable show it) while data kept
/// on a device stays right.
pub fn pressure() -> Result<(), String> {
    let devs = every_gpu_with_vm()?;
    shrink("idle")?;
    // Idle chunks on every device, without using RAM: never-touched
    // memory migrated to the device (it is cleared there), then unmapped.
    let mut idle_bytes = 0;
    for d in &devs {
        let mut held = Vec::new();
        let s = st(d)?;
        // In quarters: one mapping larger than RAM is refused.
        let len = s.vram_size as usize / 4;
        for _ in 0..4 {
            let m = Map::new(len)?;
            let out = d
                .migrate(m.addr(), len, Location::Device)
                .map_err(|e| e.to_string())?;
            check!(out.moved == (len / PAGE) as u64, "fill: {out:?}");
            held.push(m);
        }
        drop(held);
        let s = st(d)?;
        idle_bytes += s.chunks_cached * s.memmap_bytes / s.chunks_live.max(1);
    }
    // Live data on device 0, which must survive.
    let mut keep = Map::new(8 << 20)?;
    fill(keep.bytes_mut(), 99);
    let want = keep.bytes().to_vec();
    devs[0]
        .migrate(keep.addr(), keep.len(), Location::Device)
        .map_err(|e| e.to_string())?;
    let before: Vec<Stats> = devs.iter().map(st).collect::<Result<_, _>>()?;
    let avail0 = mem_available()?;
    println!(
        "pressure: {} devices, {} MiB of struct pages in idle chunks, MemAvailable {} MiB",
        devs.len(),
        idle_bytes >> 20,
        avail0 >> 20
    );
    // The hog: a child that touches memory until the shrinker has run or
    // it has taken nearly everything.
    let hog = std::process::Command::new("/proc/self/exe")
        .args(["hog", &((avail0 + (idle_bytes * 3 / 4)) >> 20).to_string()])
        .status()
        .map_err(|e| format!("hog: {e}"))?;
    println!("pressure: hog exited: {hog}");
    // Nothing may be OOM-killed: the shrinker gives memory back first.
    check!(hog.success(), "the hog did not finish: {hog}");
    let after: Vec<Stats> = devs.iter().map(st).collect::<Result<_, _>>()?;
    let avail1 = mem_available()?;
    let destroyed: u64 = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.chunks_destroyed - b.chunks_destroyed)
        .sum();
    let freed: u64 = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.shrink_freed - b.shrink_freed)
        .sum();
    let cached: u64 = after.iter().map(|s| s.chunks_cached).sum();
    println!(
        "pressure: shrinker removed {destroyed} idle chunks, freed {} MiB of struct pages; \
         {cached} chunks still cached; MemAvailable {} -> {} MiB",
        freed >> 20,
        avail0 >> 20,
        avail1 >> 20
    );
    check!(destroyed > 0 && freed > 0, "the shrinker freed nothing");
    check!(cached == 0, "{cached} idle chunks left after pressure");
    check!(
        after[0].chunks_live >= 1,
        "the chunk holding live data went away"
    );
    check!(keep.bytes() == &want[..], "live data changed");
    Ok(())
}

/// MemAvailable, in bytes.
pub(crate) fn mem_available() -> Result<u64, String> {
    let s = std::fs::read_to_string("/proc/meminfo").map_err(|e| e.to_string())?;
    s.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or("no MemAvailable".to_string())
}

/// `msvm-tests hog MIB`: takes up to MIB MiB and touches it, one MiB at a
/// time: quickly until MemAvailable is nearly gone, then paced (a workload
/// that keeps growing, not a bomb: reclaim, whose shrinker work runs in
/// the background, gets time to act). Stops early once no msvm chunk is
/// cached any more (the shrinker ran).
pub fn hog(mib: usize) -> Result<(), String> {
    let devs = every_gpu_with_vm()?;
    let cached = || -> u64 {
        devs.iter()
            .map(|d| d.stats().map(|s| s.chunks_cached).unwrap_or(1))
            .sum()
    };
    let mut held = Vec::new();
    // Waits for the shrinker while it makes progress.
    let mut patient = true;
    for i in 0..mib {
        let avail = mem_available()?;
        if avail < 48 << 20 {
            if cached() == 0 {
                println!("hog: no chunk cached after {i} MiB");
                return Ok(());
            }
            // Memory is short: grow at a workload's pace.
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        if avail < 24 << 20 && patient {
            // Nearly none left: the shrinker's work (queued by reclaim,
            // which kswapd keeps running meanwhile) gets up to 10 s to
            // free a chunk before the next MiB, however slow the machine
            // (a run under TCG on a loaded host was OOM-killed at 187 MiB
            // of 221, the chunks not freed yet).
            // Once only without progress: a shrinker that frees nothing
            // meets the OOM killer as before.
            let before = cached();
            patient = false;
            for _ in 0..200 {
                if cached() < before {
                    patient = true;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        let mut m = Map::new(1 << 20)?;
        m.bytes_mut().fill(i as u8 | 1);
        held.push(m);
    }
    // Hold the memory a little longer: the shrinker's work runs in the
    // background.
    for _ in 0..60 {
        if cached() == 0 {
            println!("hog: took {mib} MiB; no chunk cached after holding it");
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    println!("hog: took {mib} MiB, {} chunks still cached", cached());
    Ok(())
}

const COPY_FLOOR: &str = "/sys/kernel/debug/msvm/copy_floor";

/// The copy floor (`make bench`'s yardstick) times copies through pages it
/// allocates on the device (and, for P2P, on its peer), all free again
/// afterwards; every path of gpu0 runs (its peer gpu1 is in its owner
/// group), test_hmm's copy (system RAM to system RAM) too, and each reports
/// the bytes it was asked for; bad requests are refused.
fn copy_floor() -> Outcome {
    let dev = gpu0()?;
    let index = dev.index().map_err(|e| e.to_string())?;
    let s0 = st(&dev)?;
    std::fs::write(COPY_FLOOR, format!("{index} 4")).map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(COPY_FLOOR).map_err(|e| e.to_string())?;
    let s1 = st(&dev)?;
    let mut paths = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        check!(f.len() == 3, "line {line:?}");
        check!(f[1] == (4u64 << 20).to_string(), "bytes in {line:?}");
        let ns: u64 = f[2].parse().map_err(|_| format!("no time in {line:?}"))?;
        check!(ns > 0, "zero time in {line:?}");
        paths += 1;
    }
    check!(paths == 8, "{paths} paths: {text}");
    // Every page it took is free again.
    check!(
        s1.resident == s0.resident,
        "resident {} -> {}",
        s0.resident,
        s1.resident
    );
    // Nonsense is refused.
    for bad in ["0", "0 3", "99 4", "0 0", "x 4"] {
        check!(std::fs::write(COPY_FLOOR, bad).is_err(), "{bad:?} accepted");
    }
    Ok(())
}
