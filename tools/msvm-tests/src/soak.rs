//! `msvm-tests soak SECS`: `make soak`'s mixed run. For SECS seconds, at
//! once:
//! - the stress workers ([`crate::stress`], 3 processes x 2 threads, THP
//!   regions and 4 KiB ones): migrations, engine jobs, CPU rewrites,
//!   `MADV_DONTNEED` zaps, munmap and `MAP_FIXED` replacements, fork
//!   children that check the region and exit, every byte checked;
//! - a GPU that goes and comes back every few seconds: unbound and bound
//!   again through sysfs in the first half (lockdep stays on), hot-unplugged
//!   and re-plugged by the host (PCIe slot power off, pciehp) in the second;
//! - memory pressure: a process takes memory until little is left, holds
//!   it, lets it go, again and again, with idle chunks on a GPU each time
//!   (the shrinker removes them; the pressure process is the one the OOM
//!   killer would pick).
//!
//! Fails on any byte that differs or any operation that fails other than
//! with `ENODEV` on a GPU that went; the host fails the run on any kernel
//! report. Prints what was done and checked.

use std::time::{Duration, Instant};

use msvm_rt::{Device, Stats};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

use crate::check;
use crate::harness::Outcome;
use crate::lifecycle::mem_available;
use crate::svm::Map;
use crate::sysfs;
use crate::unplug::{addrs, bind_again, host_wait};

/// How long a GPU stays bound between two unplugs.
const BOUND: Duration = Duration::from_secs(8);
/// How long a GPU stays away.
const AWAY: Duration = Duration::from_secs(2);

fn oom_score_adj(v: i32) -> Result<(), String> {
    std::fs::write("/proc/self/oom_score_adj", v.to_string())
        .map_err(|e| format!("oom_score_adj: {e}"))
}

/// The pressure process's loop: leaves idle chunks on the GPU at `node`
/// (128 MiB of never-touched memory migrated there and unmapped: no RAM
/// used), then takes memory a MiB at a time until MemAvailable is under
/// 48 MiB, and on from there at a workload's pace (so that reclaim and the
/// shrinker keep up) until no chunk of that GPU is cached any more or
/// under 16 MiB is left (at most 2 GiB), holds it for a second, lets it
/// go, waits two seconds. Prints `# soak-pressure ROUNDS PEAK_MIB`.
fn pressure(node: &std::path::Path, deadline: Instant) -> Outcome {
    oom_score_adj(1000)?;
    let dev = Device::open(node).map_err(|e| e.to_string())?;
    dev.vm_create().map_err(|e| e.to_string())?;
    let (mut rounds, mut peak) = (0u64, 0usize);
    while Instant::now() < deadline {
        // Two chunks' worth (64 MiB chunks): at least one ends up idle.
        let idle = Map::new(128 << 20)?;
        // Another GPU going away (the soak unplugs gpu1 all along) stops a
        // call with EAGAIN for as long as it goes (seconds, its pages
        // evicted first): again, a little later, for up to a minute.
        let t = Instant::now();
        loop {
            match dev.migrate(idle.addr(), idle.len(), msvm_rt::Location::Device) {
                Err(e)
                    if e.errno() == Some(nix::errno::Errno::EAGAIN)
                        && t.elapsed() < Duration::from_secs(60) =>
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
                r => {
                    r.map_err(|e| e.to_string())?;
                    break;
                }
            }
        }
        drop(idle);
        let mut held = Vec::new();
        loop {
            let avail = mem_available()?;
            if held.len() >= 2048 || Instant::now() >= deadline {
                break;
            }
            if avail < 48 << 20 {
                // Memory is short: on, at a workload's pace, until the
                // shrinker has taken the idle chunks (or little is left).
                let cached = dev.stats().map(|s| s.chunks_cached).unwrap_or(0);
                if cached == 0 || avail < 16 << 20 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let mut m = Map::new(1 << 20)?;
            m.bytes_mut().fill(held.len() as u8 | 1);
            held.push(m);
        }
        peak = peak.max(held.len());
        std::thread::sleep(Duration::from_secs(1));
        drop(held);
        rounds += 1;
        println!("# soak-pressure {rounds} {peak}");
        std::thread::sleep(Duration::from_secs(2));
    }
    Ok(())
}

/// Sums `f` of the stats of `devs`.
fn total(devs: &[Device], f: impl Fn(&Stats) -> u64) -> Result<u64, String> {
    devs.iter()
        .map(|d| d.stats().map(|s| f(&s)).map_err(|e| e.to_string()))
        .sum()
}

pub fn run(secs: u64) -> Outcome {
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(secs);
    let half = t0 + Duration::from_secs(secs / 2);
    let before = sysfs::msvm_gpus()?;
    check!(before.len() >= 3, "need at least 3 GPUs");
    let all = addrs()?;
    // The one that goes: the second (QEMU's "gpu1", which the host unplugs).
    let victim = before[1].addr.clone();
    // The ones that stay, for the shrinker's counters.
    let stay: Vec<Device> = before
        .iter()
        .filter(|g| g.addr != victim)
        .map(|g| Device::open(&g.node).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let shrunk0 = total(&stay, |s| s.shrink_freed)?;
    let destroyed0 = total(&stay, |s| s.chunks_destroyed)?;

    // The workers and the pressure process; the OOM killer spares the
    // workers (they inherit this).
    oom_score_adj(-1000)?;
    let workers = crate::stress::spawn(3, 2, true, true, deadline)?;
    // SAFETY: the child runs `pressure` and exits.
    let hog = match unsafe { fork() }.map_err(|e| e.to_string())? {
        ForkResult::Child => {
            let code = match pressure(&before[0].node, deadline) {
                Ok(()) => 0,
                Err(e) => {
                    println!("# soak-pressure: {e}");
                    1
                }
            };
            // SAFETY: leaving the child without the parent's destructors.
            unsafe { nix::libc::_exit(code) };
        }
        ForkResult::Parent { child } => child,
    };

    let drv = "/sys/bus/pci/drivers/msvm";
    let (mut unbinds, mut unplugs) = (0u32, 0u32);
    let res = (|| -> Outcome {
        while Instant::now() + BOUND + Duration::from_secs(60) < deadline {
            std::thread::sleep(BOUND);
            let t = Instant::now();
            if t < half {
                std::fs::write(format!("{drv}/unbind"), &victim)
                    .map_err(|e| format!("unbind: {e}"))?;
                check!(!addrs()?.contains(&victim), "{victim} still bound");
                std::thread::sleep(AWAY);
                bind_again(&victim)?;
                unbinds += 1;
            } else {
                host_wait("device_del", "GPU unplugged", 60, || {
                    Ok(addrs()?.len() == all.len() - 1)
                })?;
                std::thread::sleep(AWAY);
                host_wait("device_add", "GPU plugged back", 60, || Ok(addrs()? == all))?;
                unplugs += 1;
            }
            println!(
                "# soak: {} at {:.0} s, {:.1} s away",
                if t < half { "unbind" } else { "hot-unplug" },
                (t - t0).as_secs_f64(),
                t.elapsed().as_secs_f64()
            );
        }
        Ok(())
    })();
    let hog_st = waitpid(hog, None).map_err(|e| e.to_string())?;
    let reaped = crate::stress::reap(workers);
    res?;
    reaped?;
    // The OOM killer may pick the pressure process: that is what it is for.
    check!(
        matches!(
            hog_st,
            WaitStatus::Exited(_, 0)
                | WaitStatus::Signaled(_, nix::sys::signal::Signal::SIGKILL, _)
        ),
        "pressure process: {hog_st:?}"
    );
    println!(
        "# soak: {unbinds} sysfs unbinds, {unplugs} hot-unplugs of {victim}; \
         shrinker on the others: {} chunks removed, {} MiB of struct pages freed; \
         MemAvailable now {} MiB",
        total(&stay, |s| s.chunks_destroyed)? - destroyed0,
        (total(&stay, |s| s.shrink_freed)? - shrunk0) >> 20,
        mem_available()? >> 20
    );
    check!(unbinds > 0 && unplugs > 0, "the GPU did not go both ways");
    Ok(())
}
