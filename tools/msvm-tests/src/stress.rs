//! `msvm-tests stress SECS PROCS THREADS [small]`: processes x threads,
//! each with its own region (1 MiB of 4 KiB pages, or for one thread of
//! each process 4 MiB of THPs: 2 MiB device folios; `small` gives every
//! thread 4 KiB pages),
//! migrating it to random devices and back, running engine
//! jobs on it from random devices (in place or not), rewriting it from the
//! CPU, zapping it (`MADV_DONTNEED`), replacing it (munmap + mmap) and
//! forking children that check it; a
//! victim process migrating in a loop is killed mid-operation. Every step's
//! result is checked against what the region must hold. Prints the
//! operations done and the bytes verified.

use std::time::{Duration, Instant};

use msvm_rt::{Device, Exec, Location};
use nix::sys::mman::{madvise, MmapAdvise};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

use crate::svm::{self, fill, Map, PAGE};
use crate::sysfs;

/// Region of the odd-seeded workers: 4 KiB pages only.
const SMALL_REGION: usize = 256 * PAGE;
/// Region of the even-seeded workers (unless `small`): two THPs (an anonymous mapping of a
/// multiple of 2 MiB is 2 MiB aligned), so that migrations of half of it at
/// random page offsets move 2 MiB folios whole and split others.
const HUGE_REGION: usize = 4 << 20;

/// What a region must hold.
#[derive(Clone, Copy)]
enum Content {
    Pattern(u64),
    Words(u64),
    Zero,
}

fn expected(c: Content, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    match c {
        Content::Pattern(seed) => fill(&mut v, seed),
        Content::Words(w) => v
            .chunks_mut(8)
            .for_each(|ch| ch.copy_from_slice(&w.to_ne_bytes())),
        Content::Zero => {}
    }
    v
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// One worker thread; returns (operations, bytes verified).
fn worker(seed: u64, thp: bool, deadline: Instant) -> Result<(u64, u64), String> {
    let devs = svm::every_gpu_with_vm()?;
    let mut r = Rng(seed | 1);
    let (region, small) = if thp && seed % 2 == 0 {
        (HUGE_REGION, false)
    } else {
        (SMALL_REGION, true)
    };
    let map = |len| {
        if small {
            Map::small(len)
        } else {
            Map::new(len)
        }
    };
    let mut m = map(region)?;
    let mut c = Content::Pattern(seed);
    fill(m.bytes_mut(), seed);
    let (mut ops, mut verified) = (0u64, 0u64);
    while Instant::now() < deadline {
        let dev = &devs[r.below(devs.len() as u64) as usize];
        match r.below(9) {
            0 | 1 => {
                let to = if r.below(2) == 0 {
                    Location::Device
                } else {
                    Location::System
                };
                let first = r.below(region as u64 / PAGE as u64 / 2) as usize * PAGE;
                dev.migrate(m.addr() + first, region / 2, to)
                    .map_err(|e| format!("migrate: {e}"))?;
            }
            2 => {
                let s = r.below(u64::MAX);
                fill(m.bytes_mut(), s);
                c = Content::Pattern(s);
            }
            3 => {
                let w = r.below(u64::MAX);
                dev.exec(Exec::Fill(w), m.addr(), region, r.below(2) == 0)
                    .map_err(|e| format!("fill: {e}"))?;
                c = Content::Words(w);
            }
            4 => {
                let got = dev
                    .exec(Exec::Checksum, m.addr(), region, r.below(2) == 0)
                    .map_err(|e| format!("checksum: {e}"))?;
                if got.result != msvm_rt::checksum(&expected(c, region)) {
                    return Err("engine checksum differs from what the region must hold".into());
                }
                verified += region as u64;
            }
            5 => {
                drop(m);
                m = map(region)?;
                c = Content::Zero;
            }
            6 => {
                let want = expected(c, region);
                // SAFETY: the child reads its copy of the region and exits.
                match unsafe { fork() }.map_err(|e| e.to_string())? {
                    ForkResult::Child => {
                        let ok = m.bytes() == &want[..];
                        // SAFETY: leaving the child at once.
                        unsafe { nix::libc::_exit(if ok { 0 } else { 1 }) };
                    }
                    ForkResult::Parent { child } => {
                        let st = waitpid(child, None).map_err(|e| e.to_string())?;
                        if st != WaitStatus::Exited(child, 0) {
                            return Err(format!("forked child saw other data: {st:?}"));
                        }
                        verified += region as u64;
                    }
                }
            }
            7 => {
                // A zap of the process's own page tables, wherever the
                // region's pages are (device folios whole or split, RAM).
                let p =
                    std::ptr::NonNull::new(m.addr() as *mut std::ffi::c_void).ok_or("null map")?;
                // SAFETY: advice on our own mapping.
                unsafe { madvise(p, region, MmapAdvise::MADV_DONTNEED) }
                    .map_err(|e| format!("madvise: {e}"))?;
                c = Content::Zero;
            }
            _ => {
                if m.bytes() != &expected(c, region)[..] {
                    return Err("CPU sees other data".into());
                }
                verified += region as u64;
            }
        }
        ops += 1;
    }
    if m.bytes() != &expected(c, region)[..] {
        return Err("final check: CPU sees other data".into());
    }
    Ok((ops, verified + region as u64))
}

/// One process: `threads` workers; exit status 0 if all held. Writes its
/// totals to stdout as `# stress-proc OPS BYTES`.
fn process(seed: u64, threads: u64, thp: bool, deadline: Instant) -> i32 {
    let res: Vec<Result<(u64, u64), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || worker(seed.wrapping_mul(31).wrapping_add(t), thp, deadline)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
            .collect()
    });
    let (mut ops, mut bytes, mut ok) = (0, 0, true);
    for r in res {
        match r {
            Ok((o, b)) => {
                ops += o;
                bytes += b;
            }
            Err(e) => {
                println!("# stress: {e}");
                ok = false;
            }
        }
    }
    println!("# stress-proc {ops} {bytes}");
    if ok {
        0
    } else {
        1
    }
}

pub fn run(secs: u64, procs: u64, threads: u64, thp: bool) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut children = Vec::new();
    for p in 0..procs {
        // SAFETY: the child runs its workers and exits.
        match unsafe { fork() }.map_err(|e| e.to_string())? {
            ForkResult::Child => {
                let code = process(1000 + p, threads, thp, deadline);
                // SAFETY: leaving the child without the parent's destructors.
                unsafe { nix::libc::_exit(code) };
            }
            ForkResult::Parent { child } => children.push(child),
        }
    }
    // A victim migrating in a loop, killed mid-operation.
    // SAFETY: the child loops until killed.
    let victim = match unsafe { fork() }.map_err(|e| e.to_string())? {
        ForkResult::Child => {
            let _ = (|| -> Result<(), String> {
                let devs: Vec<Device> = sysfs::msvm_gpus()?
                    .iter()
                    .filter_map(|g| Device::open(&g.node).ok())
                    .collect();
                for d in &devs {
                    let _ = d.vm_create();
                }
                let m = Map::new(4 << 20)?;
                for i in 0.. {
                    let d = &devs[i % devs.len()];
                    let _ = d.migrate(m.addr(), m.len(), Location::Device);
                    let _ = d.exec(Exec::Fill(i as u64), m.addr(), m.len(), false);
                }
                Ok(())
            })();
            // SAFETY: leaving the child.
            unsafe { nix::libc::_exit(0) };
        }
        ForkResult::Parent { child } => child,
    };
    std::thread::sleep(Duration::from_secs(secs / 2).max(Duration::from_millis(500)));
    kill(victim, Signal::SIGKILL).map_err(|e| e.to_string())?;
    let _ = waitpid(victim, None);
    let mut failed = 0;
    for c in children {
        match waitpid(c, None).map_err(|e| e.to_string())? {
            WaitStatus::Exited(_, 0) => {}
            st => {
                println!("# stress: process {c}: {st:?}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        return Err(format!("{failed} process(es) failed"));
    }
    Ok(())
}
