//! `msvm-tests stress SECS PROCS THREADS [small]`: processes x threads,
//! each with its own region (1 MiB of 4 KiB pages, or for one thread of
//! each process 4 MiB of THPs: 2 MiB device folios with msvm's
//! `large_folios=1`, 4 KiB pages by default; `small` gives every
//! thread 4 KiB pages),
//! migrating it to random devices and back, running engine
//! jobs on it from random devices (in place or not), rewriting it from the
//! CPU, zapping it (`MADV_DONTNEED`), replacing it whole (munmap + mmap) or
//! its upper half (`MAP_FIXED` over it) and forking children that check it
//! and exit; a victim process migrating in a loop is killed mid-operation.
//! Every step's result is checked against what the region must hold.
//! Each worker first moves its whole region to the first GPU (the regions
//! together exceed a small `dmem.max` there on any machine).
//! Prints the operations done and the bytes verified.
//!
//! The workers also serve `make soak` ([`crate::soak`]), where GPUs go and
//! come back while they run: there an operation that fails with `ENODEV`
//! (its device went) is counted, its region's content re-established if the
//! operation may have written part of it, and the devices opened again.

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use msvm_rt::{Device, Exec, Location};
use nix::errno::Errno;
use nix::sys::mman::{madvise, mmap_anonymous, MapFlags, MmapAdvise, ProtFlags};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};

use crate::svm::{self, fill, Map, PAGE};
use crate::sysfs;

/// Region of the odd-seeded workers: 4 KiB pages only.
const SMALL_REGION: usize = 256 * PAGE;
/// Region of the even-seeded workers (unless `small`): two THPs (an anonymous mapping of a
/// multiple of 2 MiB is 2 MiB aligned), so that migrations of half of it at
/// random page offsets move 2 MiB folios whole and split others.
const HUGE_REGION: usize = 4 << 20;
/// How often a worker that expects GPUs to come back opens them again.
const REOPEN: Duration = Duration::from_secs(2);

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// What the workers did.
#[derive(Default, Clone, Copy)]
pub struct Counts {
    /// Operations done.
    pub ops: u64,
    /// Bytes checked against what they must be.
    pub verified: u64,
    /// Operations that failed because their device went (`ENODEV`).
    pub unplugged: u64,
}

impl core::ops::AddAssign for Counts {
    fn add_assign(&mut self, o: Self) {
        self.ops += o.ops;
        self.verified += o.verified;
        self.unplugged += o.unplugged;
    }
}

/// The GPUs a worker uses, with a VM each. With `replug`, GPUs may go and
/// come back: then they are opened again after an `ENODEV` and every
/// [`REOPEN`], and a GPU that is going away meanwhile is left out.
struct Gpus {
    devs: Vec<Device>,
    opened: Instant,
    replug: bool,
}

impl Gpus {
    fn open(replug: bool) -> Result<Self, String> {
        let devs = if replug {
            sysfs::msvm_gpus()?
                .iter()
                .filter_map(|g| {
                    let d = Device::open(&g.node).ok()?;
                    d.vm_create().ok()?;
                    Some(d)
                })
                .collect()
        } else {
            svm::every_gpu_with_vm()?
        };
        if devs.is_empty() {
            return Err("no GPU to open".into());
        }
        Ok(Self {
            devs,
            opened: Instant::now(),
            replug,
        })
    }

    fn pick(&mut self, r: &mut Rng) -> Result<&Device, String> {
        if self.replug && self.opened.elapsed() > REOPEN {
            *self = Self::open(true)?;
        }
        Ok(&self.devs[r.below(self.devs.len() as u64) as usize])
    }

    /// Whether `e` says the device went, as it may here (`ENODEV`; another
    /// GPU going away stops a call in progress with `EAGAIN`); if so, the
    /// GPUs are opened again at the next pick.
    fn went(&mut self, e: &msvm_rt::Error) -> bool {
        let went = self.replug && matches!(e.errno(), Some(Errno::ENODEV) | Some(Errno::EAGAIN));
        if went {
            self.opened = Instant::now() - 2 * REOPEN;
        }
        went
    }
}

/// Replaces the upper half of `m` with a fresh anonymous mapping (a partial
/// munmap and a new VMA in its place, as `MAP_FIXED` does).
fn replace_upper_half(m: &Map) -> Result<(), String> {
    let half = m.len() / 2;
    let at = NonZeroUsize::new(m.addr() + half).ok_or("null map")?;
    // SAFETY: the range is the upper half of our own mapping, borrowed by
    // nothing (the caller's `&Map` only gives its address); the new
    // mapping keeps it mapped, read-write, for `m`'s life.
    unsafe {
        mmap_anonymous(
            Some(at),
            NonZeroUsize::new(half).ok_or("empty map")?,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_PRIVATE | MapFlags::MAP_FIXED,
        )
    }
    .map_err(|e| format!("mmap MAP_FIXED: {e}"))?;
    Ok(())
}

/// One worker thread.
fn worker(seed: u64, thp: bool, replug: bool, deadline: Instant) -> Result<Counts, String> {
    let mut gpus = Gpus::open(replug)?;
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
    // What the region must hold.
    let mut want = vec![0u8; region];
    fill(m.bytes_mut(), seed);
    fill(&mut want, seed);
    let mut n = Counts::default();
    // The whole region on the first GPU first: together the workers' regions
    // are more than a cgroup's dmem.max there (make test's 4M), so the limit
    // is reached on any machine, not only where the random phase is fast.
    match gpus.devs[0].migrate(m.addr(), region, Location::Device) {
        Ok(_) => n.ops += 1,
        Err(e) if gpus.went(&e) => n.unplugged += 1,
        Err(e) => return Err(format!("placing the region: {e}")),
    }
    while Instant::now() < deadline {
        let dev = gpus.pick(&mut r)?;
        let res = match r.below(10) {
            0 | 1 => {
                let to = if r.below(2) == 0 {
                    Location::Device
                } else {
                    Location::System
                };
                let first = r.below(region as u64 / PAGE as u64 / 2) as usize * PAGE;
                dev.migrate(m.addr() + first, region / 2, to)
                    .map(drop)
                    .map_err(|e| ("migrate", e))
            }
            2 => {
                let s = r.below(u64::MAX);
                fill(m.bytes_mut(), s);
                fill(&mut want, s);
                Ok(())
            }
            3 => {
                let w = r.below(u64::MAX);
                let res = dev
                    .exec(Exec::Fill(w), m.addr(), region, r.below(2) == 0)
                    .map(drop)
                    .map_err(|e| ("fill", e));
                if res.is_ok() {
                    want.chunks_mut(8)
                        .for_each(|ch| ch.copy_from_slice(&w.to_ne_bytes()));
                }
                res
            }
            4 => match dev.exec(Exec::Checksum, m.addr(), region, r.below(2) == 0) {
                Ok(got) if got.result != msvm_rt::checksum(&want) => {
                    return Err("engine checksum differs from what the region must hold".into());
                }
                Ok(_) => {
                    n.verified += region as u64;
                    Ok(())
                }
                Err(e) => Err(("checksum", e)),
            },
            5 => {
                drop(m);
                m = map(region)?;
                want.fill(0);
                Ok(())
            }
            6 => {
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
                        n.verified += region as u64;
                    }
                }
                Ok(())
            }
            7 => {
                // A zap of the process's own page tables, wherever the
                // region's pages are (device folios whole or split, RAM).
                let p =
                    std::ptr::NonNull::new(m.addr() as *mut std::ffi::c_void).ok_or("null map")?;
                // SAFETY: advice on our own mapping.
                unsafe { madvise(p, region, MmapAdvise::MADV_DONTNEED) }
                    .map_err(|e| format!("madvise: {e}"))?;
                want.fill(0);
                Ok(())
            }
            8 => {
                replace_upper_half(&m)?;
                want[region / 2..].fill(0);
                Ok(())
            }
            _ => {
                if m.bytes() != &want[..] {
                    return Err("CPU sees other data".into());
                }
                n.verified += region as u64;
                Ok(())
            }
        };
        match res {
            Ok(()) => n.ops += 1,
            Err((what, e)) if gpus.went(&e) => {
                n.unplugged += 1;
                if what == "fill" {
                    // The job may have written part of the region.
                    let s = r.below(u64::MAX);
                    fill(m.bytes_mut(), s);
                    fill(&mut want, s);
                }
            }
            Err((what, e)) => return Err(format!("{what}: {e}")),
        }
    }
    if m.bytes() != &want[..] {
        return Err("final check: CPU sees other data".into());
    }
    n.verified += region as u64;
    Ok(n)
}

/// One process: `threads` workers; exit status 0 if all held. Writes its
/// totals to stdout as `# stress-proc OPS BYTES UNPLUGGED`.
fn process(seed: u64, threads: u64, thp: bool, replug: bool, deadline: Instant) -> i32 {
    let res: Vec<Result<Counts, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let seed = seed.wrapping_mul(31).wrapping_add(t);
                s.spawn(move || worker(seed, thp, replug, deadline))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
            .collect()
    });
    let (mut n, mut ok) = (Counts::default(), true);
    for r in res {
        match r {
            Ok(c) => n += c,
            Err(e) => {
                println!("# stress: {e}");
                ok = false;
            }
        }
    }
    println!("# stress-proc {} {} {}", n.ops, n.verified, n.unplugged);
    if ok {
        0
    } else {
        1
    }
}

/// Forks `procs` worker processes of `threads` workers each, which run
/// until `deadline`; `replug`: GPUs may go and come back meanwhile.
pub fn spawn(
    procs: u64,
    threads: u64,
    thp: bool,
    replug: bool,
    deadline: Instant,
) -> Result<Vec<Pid>, String> {
    let mut children = Vec::new();
    for p in 0..procs {
        // SAFETY: the child runs its workers and exits.
        match unsafe { fork() }.map_err(|e| e.to_string())? {
            ForkResult::Child => {
                let code = process(1000 + p, threads, thp, replug, deadline);
                // SAFETY: leaving the child without the parent's destructors.
                unsafe { nix::libc::_exit(code) };
            }
            ForkResult::Parent { child } => children.push(child),
        }
    }
    Ok(children)
}

/// Waits for the worker processes of [`spawn`]; fails if any failed.
pub fn reap(children: Vec<Pid>) -> Result<(), String> {
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

pub fn run(secs: u64, procs: u64, threads: u64, thp: bool) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let children = spawn(procs, threads, thp, false, deadline)?;
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
    reap(children)
}
