//! `msvm-tests bench-jobs [MIB]`: warm jobs over MIB MiB of gpu0's VRAM
//! (the VM's table covers them: no fault) run by msvm-gpu's job engine
//! against the same jobs run by msvm's CPU engine (debugfs `job_engine`
//! 0), alternating in one boot, the best of [`ROUNDS`] each. Prints
//! `BENCH hw_warm_job_<MIB>M_{checksum,atomic_add}.{device,cpu}` (GiB/s) and
//! `.speedup` (the device's throughput over the CPU's).
//!
//! The job engine runs natively in the device process, the CPU engine in
//! the guest under TCG: the speedup measures that difference as much as
//! the driver's path (a table write, a doorbell and an interrupt per 2 MiB
//! window). `hw_warm_job_<MIB>M.overhead`: the device's CHECKSUM's ioctl
//! time over the time the device says its job engine ran (`JOB_BUSY`),
//! the median of the rounds, its windows pipelined (each queued behind
//! the one running); `.overhead_unpipelined` the same, one window at a
//! time (debugfs `job_engine`'s `pipeline 0`), in the same rounds.
//! `hw_p2p_over_own_<MIB>M`: the same CHECKSUM in place by gpu0's P2P
//! peer's job engine (reading gpu0's VRAM over P2P, inside the switch,
//! which routes the bus address to gpu0's VRAM) over gpu0's own, best of
//! each. Then the
//! smallest job's round trip each way
//! (`hw_job_latency_{device,cpu}_{p50,p99}_us`).

use std::time::Instant;

use msvm_rt::{checksum, Exec, Location};

use crate::bench::{buffer, counters_off, gibps};
use crate::hw::debugfs_row;
use crate::hw_jobs::{job_counters, use_jobs, JobCounters};
use crate::hw_pipeline::set_pipeline;

/// Rounds of each mode (the best counts).
const ROUNDS: usize = 5;

/// msvm's phase split of steps and jobs per device.
const PHASES: &str = "/sys/kernel/debug/msvm/phases";

pub fn run(mib: usize) -> Result<(), String> {
    let r = measure(mib);
    // Whatever happened, jobs run on the engines again, pipelined.
    let on = use_jobs(true);
    set_pipeline(true)?;
    on?;
    r
}

fn measure(mib: usize) -> Result<(), String> {
    let len = mib << 20;
    let (dev, peer, _) = crate::multi::devices()?;
    let index = dev.index().map_err(|e| e.to_string())?;
    let jobs = || -> Result<JobCounters, String> {
        job_counters(index)?.ok_or_else(|| format!("gpu{index} has no job engine (not msvm-gpu?)"))
    };
    // gpu0's job phases: jobs, place_us, walk_us, bind_us, exec_us.
    let phases = || -> Result<Vec<u64>, String> {
        debugfs_row(PHASES, index, 6)?.ok_or_else(|| format!("{PHASES}: no jobs row of gpu{index}"))
    };
    let p = buffer(len)?;
    for (i, w) in p.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    let addr = p.as_ptr() as usize;
    // SAFETY: the buffer's bytes, read while nothing writes them.
    let want = checksum(unsafe { std::slice::from_raw_parts(addr as *const u8, len) });
    dev.migrate(addr, len, Location::Device)
        .map_err(|e| e.to_string())?;
    // Warm: the first job faults the table in.
    dev.exec(Exec::Checksum, addr, len, false)
        .map_err(|e| e.to_string())?;
    let windows = (len / (2 << 20)) as u64;
    // Best times: [device, cpu] x [checksum, fill].
    let mut best = [[f64::MAX; 2]; 2];
    // The device's CHECKSUMs: ioctl time over the device's busy time.
    let mut overhead = Vec::with_capacity(ROUNDS);
    let mut unpipelined = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        for (mode, on) in [(0, true), (1, false)] {
            use_jobs(on)?;
            let before = jobs()?;
            let phases_before = phases()?;
            let t = Instant::now();
            let sum = dev
                .exec(Exec::Checksum, addr, len, false)
                .map_err(|e| format!("CHECKSUM: {e}"))?
                .result;
            let t_sum = t.elapsed().as_secs_f64();
            if sum != want {
                return Err(format!("CHECKSUM {sum:#x}, want {want:#x}"));
            }
            let now = jobs()?;
            let phases_after = phases()?;
            let busy = now.busy_us.saturating_sub(before.busy_us);
            if on && now.pipelined == before.pipelined {
                return Err(format!(
                    "the device's CHECKSUM was not pipelined: {before:?} -> {now:?}"
                ));
            }
            if on {
                if busy == 0 {
                    return Err(format!("the device says it ran no job ({busy} us)"));
                }
                overhead.push(t_sum * 1e6 / busy as f64);
                // msvm's phases of the job (debugfs `phases`): from its
                // placement pass's start (the VM's lock held) to its end.
                let ph: Vec<u64> = (2..6)
                    .map(|k| phases_after[k].saturating_sub(phases_before[k]))
                    .collect();
                println!(
                    "# hw_warm_job_{mib}M round {round}: CHECKSUM ioctl {:.0} us, the device busy {busy} us, {} jobs, {} pipelined, {} yields; msvm's phases: place {} us, walk {}, bind {}, exec {}",
                    t_sum * 1e6,
                    now.runs - before.runs,
                    now.pipelined - before.pipelined,
                    now.yields - before.yields,
                    ph[0],
                    ph[1],
                    ph[2],
                    ph[3]
                );
            }
            // An ATOMIC_ADD of 0: every word read and written, the data kept.
            let t = Instant::now();
            dev.exec(Exec::AtomicAdd(0), addr, len, false)
                .map_err(|e| format!("ATOMIC_ADD: {e}"))?;
            let t_add = t.elapsed().as_secs_f64();
            let after = jobs()?;
            // The mode took the path it names: one job per window each,
            // or none.
            let ran = after.runs - before.runs;
            if (on && ran < 2 * windows) || (!on && ran != 0) || after.failed != before.failed {
                return Err(format!(
                    "job_engine {} (round {round}): {ran} jobs on the device for {} windows; {before:?} -> {after:?}",
                    u8::from(on),
                    2 * windows
                ));
            }
            best[mode][0] = best[mode][0].min(t_sum);
            best[mode][1] = best[mode][1].min(t_add);
        }
        // The same CHECKSUM on the device, one window at a time.
        use_jobs(true)?;
        set_pipeline(false)?;
        let before = jobs()?;
        let t = Instant::now();
        let sum = dev.exec(Exec::Checksum, addr, len, false);
        let t_sum = t.elapsed().as_secs_f64();
        set_pipeline(true)?;
        let after = jobs()?;
        let sum = sum
            .map_err(|e| format!("CHECKSUM, unpipelined: {e}"))?
            .result;
        if sum != want || after.pipelined != before.pipelined || after.runs - before.runs < windows
        {
            return Err(format!(
                "CHECKSUM, unpipelined (round {round}): {sum:#x}; {before:?} -> {after:?}"
            ));
        }
        let busy = after.busy_us.saturating_sub(before.busy_us).max(1);
        unpipelined.push(t_sum * 1e6 / busy as f64);
    }
    for (i, w) in p.iter().enumerate() {
        if *w != (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) {
            return Err(format!("word {i} is {w:#x} after the jobs"));
        }
    }
    // The same CHECKSUM by gpu0's peer, in place: over P2P (the access
    // counters off: they would move the buffer to the peer).
    peer.set_attr(addr, len, counters_off())
        .map_err(|e| e.to_string())?;
    let on_gpu0 = || -> Result<u64, String> {
        let r = dev.residency(addr, len).map_err(|e| e.to_string())?;
        Ok(r.devices[index as usize])
    };
    // Back in gpu0's memory (the check above faulted it home).
    dev.migrate(addr, len, Location::Device)
        .map_err(|e| e.to_string())?;
    let before = on_gpu0()?;
    // On the peer's job engine (the rounds above ended with the CPU's).
    use_jobs(true)?;
    let peer_index = peer.index().map_err(|e| e.to_string())?;
    let peer_jobs = || -> Result<JobCounters, String> {
        job_counters(peer_index)?.ok_or_else(|| format!("gpu{peer_index} has no job engine"))
    };
    let peer_before = peer_jobs()?;
    let mut p2p = f64::MAX;
    for _ in 0..ROUNDS.min(3) {
        let t = Instant::now();
        let sum = peer
            .exec(Exec::Checksum, addr, len, true)
            .map_err(|e| format!("CHECKSUM over P2P: {e}"))?
            .result;
        p2p = p2p.min(t.elapsed().as_secs_f64());
        if sum != want {
            return Err(format!("CHECKSUM over P2P {sum:#x}, want {want:#x}"));
        }
    }
    let peer_after = peer_jobs()?;
    if peer_after.bytes_read - peer_before.bytes_read < 3 * len as u64 {
        return Err(format!(
            "the P2P CHECKSUMs did not run on gpu{peer_index}'s job engine: {peer_before:?} -> {peer_after:?}"
        ));
    }
    let after = on_gpu0()?;
    if before != len as u64 || after != len as u64 {
        return Err(format!(
            "the buffer is not all in gpu0's memory: {before} bytes before the P2P jobs, {after} after"
        ));
    }
    latency(&dev, addr)?;
    overhead.sort_by(f64::total_cmp);
    unpipelined.sort_by(f64::total_cmp);
    println!(
        "BENCH hw_warm_job_{mib}M.overhead {:.3} x",
        overhead[overhead.len() / 2]
    );
    println!(
        "BENCH hw_warm_job_{mib}M.overhead_unpipelined {:.3} x",
        unpipelined[unpipelined.len() / 2]
    );
    println!("BENCH hw_p2p_over_own_{mib}M {:.2} x", p2p / best[0][0]);
    for (k, op) in ["checksum", "atomic_add"].iter().enumerate() {
        let name = format!("hw_warm_job_{mib}M_{op}");
        let (d, c) = (best[0][k], best[1][k]);
        println!("BENCH {name}.device {:.3} GiB/s", gibps(len, d));
        println!("BENCH {name}.cpu {:.3} GiB/s", gibps(len, c));
        println!("BENCH {name}.speedup {:.2} x", c / d);
    }
    Ok(())
}

/// Samples of each mode for the latency.
const SAMPLES: usize = 300;

/// The round trip of the smallest job (an 8-byte ATOMIC_ADD of 0 on a
/// warm VRAM page) on the device and on the CPU, alternating: prints
/// `hw_job_latency_{device,cpu}_{p50,p99}_us`.
fn latency(dev: &msvm_rt::Device, addr: usize) -> Result<(), String> {
    let mut t = [Vec::with_capacity(SAMPLES), Vec::with_capacity(SAMPLES)];
    for _ in 0..SAMPLES {
        for (mode, on) in [(0, true), (1, false)] {
            use_jobs(on)?;
            let s = Instant::now();
            dev.exec(Exec::AtomicAdd(0), addr, 8, false)
                .map_err(|e| format!("ATOMIC_ADD: {e}"))?;
            t[mode].push(s.elapsed().as_secs_f64() * 1e6);
        }
    }
    for (mode, name) in ["device", "cpu"].iter().enumerate() {
        let v = &mut t[mode];
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
        println!("BENCH hw_job_latency_{name}_p50_us {:.1} us", at(0.5));
        println!("BENCH hw_job_latency_{name}_p99_us {:.1} us", at(0.99));
    }
    Ok(())
}
