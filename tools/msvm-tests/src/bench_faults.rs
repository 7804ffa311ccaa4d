//! `msvm-tests bench-faults`: the round trip of msvm-gpu's replayable
//! fault for a 4 KiB job (a CHECKSUM): the device stalls on the page the
//! VM's table lacks, writes the record, raises FAULT; msvm takes it,
//! services it on the fault handler, writes the entry, invalidates and
//! replays; the device finishes the job. Timed from the ioctl's start to
//! its end, per kind of page: `own` (gpu0's VRAM), `dma` (system RAM, a
//! job in place), `p2p` (gpu1's VRAM, a job in place over P2P); `first`
//! (the page's 2 MiB block has no entry left: the table's leaf goes and
//! comes back) and `warm` (one page's entry gone, its block's still
//! there). Each sample's entry is zapped by an `mprotect` round trip
//! before it, outside the time. Prints
//! `BENCH latency_hwfault_<kind>_<first|warm>_{p50,p99}_us`, with
//! `latency_hwfault_nofault_p50_us` (the same job, its entry there) to
//! compare, and fails unless every sample stalled and was replayed.
//! `msvm-tests bench-faults NAME` names them `NAME_...` instead (the
//! IOMMU boot's `iommu_strict_latency_fault`).

use std::time::Instant;

use msvm_rt::{Device, Exec, Location};
use nix::sys::mman::{mprotect, ProtFlags};

use crate::bench::buffer;
use crate::hw_jobs::{job_counters, JobCounters};
use crate::sysfs;

/// Samples of each kind and mode.
const SAMPLES: usize = 48;
const HUGE: usize = 2 << 20;
const PAGE: usize = 4096;

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

pub fn run(name: &str) -> Result<(), String> {
    let gpus = sysfs::msvm_gpus()?;
    let open = |k: usize| -> Result<Device, String> {
        let g = gpus.get(k).ok_or_else(|| format!("no gpu{k}"))?;
        let d = Device::open(&g.node).map_err(e)?;
        d.vm_create().map_err(e)?;
        Ok(d)
    };
    let dev = open(0)?;
    let peer = open(1)?;
    let index = dev.index().map_err(e)?;
    let counters = || -> Result<JobCounters, String> {
        job_counters(index)?.ok_or_else(|| format!("gpu{index} has no job engine (not msvm-gpu?)"))
    };
    let mut nofault = Vec::new();
    for kind in ["own", "dma", "p2p"] {
        // Block 0 for the warm samples, one block each for the first ones.
        let len = (SAMPLES + 1) * HUGE;
        let p = buffer(len)?;
        for (i, w) in p.iter_mut().enumerate() {
            *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        let addr = p.as_ptr() as usize;
        let in_place = kind != "own";
        match kind {
            "own" => dev.migrate(addr, len, Location::Device).map_err(e)?,
            "p2p" => peer.migrate(addr, len, Location::Device).map_err(e)?,
            _ => Default::default(),
        };
        let job = |at: usize| -> Result<f64, String> {
            let t = Instant::now();
            dev.exec(Exec::Checksum, at, PAGE, in_place)
                .map_err(|x| format!("{kind}: CHECKSUM: {x}"))?;
            Ok(t.elapsed().as_secs_f64() * 1e6)
        };
        // The entries of block 0 (and the mirror's first fault, serviced
        // in the job's context) before any sample.
        dev.exec(Exec::Checksum, addr, HUGE, in_place)
            .map_err(|x| format!("{kind}: CHECKSUM of block 0: {x}"))?;
        let before = counters()?;
        let mut t = [Vec::new(), Vec::new()];
        for k in 0..SAMPLES {
            // First: a block of its own, every entry zapped.
            let block = addr + (k + 1) * HUGE;
            zap(block, HUGE)?;
            t[0].push(job(block)?);
            // Warm: one page of block 0, the others keep their entries.
            let page = addr + (1 + k) * PAGE;
            zap(page, PAGE)?;
            t[1].push(job(page)?);
            if kind == "own" {
                nofault.push(job(page)?);
            }
        }
        let after = counters()?;
        let stalls = after.stalls - before.stalls;
        let want = 2 * SAMPLES as u64;
        if stalls < want || after.replays - before.replays < want || after.cancels != before.cancels
        {
            return Err(format!(
                "{kind}: {stalls} stalls for {want} faulting jobs, or not all replayed: {before:?} -> {after:?}"
            ));
        }
        for (mode, v) in ["first", "warm"].into_iter().zip(t.iter_mut()) {
            let (p50, p99) = percentiles(v);
            println!("BENCH {name}_{kind}_{mode}_p50_us {p50:.1} us");
            println!("BENCH {name}_{kind}_{mode}_p99_us {p99:.1} us");
        }
    }
    let (p50, _) = percentiles(&mut nofault);
    println!("BENCH {name}_nofault_p50_us {p50:.1} us");
    Ok(())
}

/// Zaps the VM's entries of `[addr, addr + len)`: an invalidation (a
/// write-protect and back) that moves no page.
fn zap(addr: usize, len: usize) -> Result<(), String> {
    let p = std::ptr::NonNull::new(addr as *mut std::ffi::c_void).ok_or("null")?;
    for prot in [
        ProtFlags::PROT_READ,
        ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
    ] {
        // SAFETY: the range is this benchmark's own buffer, which nothing
        // writes while it is read-only.
        unsafe { mprotect(p, len, prot) }.map_err(|x| format!("mprotect: {x}"))?;
    }
    Ok(())
}

/// The median and the 99th percentile of `v`, sorted.
fn percentiles(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        v.get(((v.len().max(1) - 1) as f64 * q) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    (at(0.5), at(0.99))
}
