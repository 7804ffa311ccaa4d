//! `msvm-tests fuzz SEED CALLS SECS`: every msvm ioctl with random,
//! boundary and hostile arguments, mixed with valid calls, while another
//! thread maps, unmaps and re-protects the memory they point at and forked
//! children use inherited files. Pass: every call returns success or one of
//! its documented errnos, and the data the fuzzer keeps on the side (one
//! buffer it only moves, never writes through the engine) survives.

use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use msvm_rt::abi::{
    self, DrmMsvmExec, DrmMsvmMigrate, DrmMsvmPeer, DrmMsvmPrefetch, DrmMsvmQuery,
    DrmMsvmResidency, DrmMsvmSetAttr, DrmMsvmStats, DrmMsvmVmCreate,
};
use msvm_rt::{Device, Location};
use nix::errno::Errno;
use nix::sys::mman::{mmap_anonymous, mprotect, munmap, MapFlags, ProtFlags};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, ForkResult};

use crate::svm::{self, fill, verify, Map, PAGE};
use crate::sysfs;

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }
}

/// The arena the fuzzer points into: 4 MiB whose pages another thread
/// keeps remapping.
const ARENA: usize = 4 << 20;

/// The PROT_NONE guard on each side of the arena: more than the 64 pages a
/// valid length reaches past an arena address.
const GUARD: usize = 1 << 20;

/// The data the fuzzer keeps on the side.
const KEEP: usize = 64 * PAGE;

/// A PMD: the arena's alignment.
const HUGE: usize = 2 << 20;

fn addr(r: &mut Rng, arena: usize) -> u64 {
    let a = arena as u64;
    match r.below(10) {
        0..=5 => a + r.below(ARENA as u64 / PAGE as u64) * PAGE as u64,
        6 => a + r.below(ARENA as u64),
        7 => r.pick(&[
            0,
            8,
            PAGE as u64,
            0xffff_8880_0000_0000,
            !0xfff,
            (1 << 47) - PAGE as u64,
            1 << 47,
        ]),
        8 => r.next(),
        _ => a + ARENA as u64 - PAGE as u64,
    }
}

fn len(r: &mut Rng) -> u64 {
    match r.below(8) {
        0..=4 => (1 + r.below(64)) * PAGE as u64,
        5 => r.below(4 * PAGE as u64),
        6 => r.pick(&[0, 8, u64::MAX, !0xfff, 1 << 47]),
        _ => r.next(),
    }
}

fn small(r: &mut Rng) -> u32 {
    match r.below(4) {
        0 | 1 => 0,
        2 => r.below(8) as u32,
        _ => r.next() as u32,
    }
}

/// Whether `res` is documented for MIGRATE and EXEC. `EPERM` is: a forked
/// child sharing the file may have created the VM (which is then its own).
fn memory_ioctl_errno(res: Result<(), Errno>) -> bool {
    matches!(
        res,
        Ok(())
            | Err(Errno::EINVAL
                | Errno::EFAULT
                | Errno::EACCES
                | Errno::ENOENT
                | Errno::EPERM
                | Errno::ENOMEM
                | Errno::ENOSPC)
    )
}

/// A location and device index for SET_ATTR and PREFETCH.
fn location(r: &mut Rng, valid: bool) -> (u32, u32) {
    let loc = if valid { r.below(3) as u32 } else { small(r) };
    let dev = if loc == abi::MSVM_LOC_DEVICE || !valid {
        let x = r.next() as u32;
        r.pick(&[0, 1, 2, 3, 15, 16, abi::MSVM_QUERY_SELF, x])
    } else {
        0
    };
    (loc, dev)
}

/// One random call; returns the errno if it failed, and whether that errno
/// is documented for it.
fn call(r: &mut Rng, dev: &Device, arena: usize) -> (&'static str, Result<(), Errno>, bool) {
    let valid = r.below(3) == 0;
    let err = |res: msvm_rt::Result<()>| res.map_err(|e| e.errno().unwrap_or(Errno::EIO));
    match r.below(10) {
        0 => {
            let mut peers = [DrmMsvmPeer::default(); 4];
            let mut q = DrmMsvmQuery {
                device: if valid {
                    abi::MSVM_QUERY_SELF
                } else {
                    {
                        let x = r.next() as u32;
                        r.pick(&[0, 1, 2, 15, 16, abi::MSVM_QUERY_SELF, x])
                    }
                },
                peer_size: if valid { 16 } else { small(r) },
                num_peers: if valid { 4 } else { small(r) },
                peers_ptr: if valid {
                    peers.as_mut_ptr() as u64
                } else {
                    addr(r, arena)
                },
                flags: if valid { 0 } else { small(r) },
                ..Default::default()
            };
            if !valid && r.below(4) == 0 {
                q.reserved[r.below(3) as usize] = r.next();
            }
            let res = err(dev.query_raw(&mut q));
            (
                "QUERY",
                res,
                matches!(
                    res,
                    Ok(()) | Err(Errno::EINVAL | Errno::ENOENT | Errno::EFAULT)
                ),
            )
        }
        1 => {
            let mut a = DrmMsvmVmCreate {
                flags: if valid { 0 } else { small(r) },
                ..Default::default()
            };
            let res = err(dev.vm_create_raw(&mut a));
            (
                "VM_CREATE",
                res,
                matches!(res, Ok(()) | Err(Errno::EINVAL | Errno::EBUSY)),
            )
        }
        2 => {
            let res = err(if r.below(4) == 0 {
                dev.vm_destroy()
            } else {
                Ok(())
            });
            (
                "VM_DESTROY",
                res,
                matches!(res, Ok(()) | Err(Errno::ENOENT)),
            )
        }
        3 | 4 => {
            let mut m = DrmMsvmMigrate {
                addr: addr(r, arena),
                length: len(r),
                to: if valid { r.below(2) as u32 } else { small(r) },
                flags: if valid { 0 } else { small(r) },
                ..Default::default()
            };
            if !valid && r.below(8) == 0 {
                m.reserved[r.below(2) as usize] = r.next();
            }
            let res = err(dev.migrate_raw(&mut m));
            ("MIGRATE", res, memory_ioctl_errno(res))
        }
        5 => {
            let mut e = DrmMsvmExec {
                op: if valid {
                    1 + r.below(4) as u32
                } else {
                    small(r)
                },
                flags: if valid { r.below(2) as u32 } else { small(r) },
                addr: addr(r, arena),
                length: len(r),
                ..Default::default()
            };
            // Words for ATOMIC_ADD; any bytes for the others (ABI 17).
            if valid && e.op == abi::MSVM_EXEC_ATOMIC_ADD {
                e.addr &= !7;
                e.length &= !7;
            }
            match e.op {
                abi::MSVM_EXEC_COPY => e.src = addr(r, arena),
                abi::MSVM_EXEC_FILL | abi::MSVM_EXEC_ATOMIC_ADD => e.value = r.next(),
                _ => {}
            }
            // A FILL pattern (ABI version 17): from the arena, a valid
            // size, or anything.
            if e.op == abi::MSVM_EXEC_FILL && r.below(2) == 0 {
                e.value = 0;
                e.src = addr(r, arena);
                e.pattern_size = if valid {
                    1 + r.below(128) as u32
                } else {
                    small(r)
                };
            }
            if !valid && r.below(8) == 0 {
                e.src = r.next();
                e.value = r.next();
                e.pattern_size = r.next() as u32;
            }
            let res = err(dev.exec_raw(&mut e));
            (
                "EXEC",
                res,
                memory_ioctl_errno(res) || res == Err(Errno::EAGAIN),
            )
        }
        7 => {
            let (location, device) = location(r, valid);
            let mut a = DrmMsvmSetAttr {
                addr: addr(r, arena),
                length: len(r),
                location,
                device,
                access: if valid { r.below(3) as u32 } else { small(r) },
                flags: if valid {
                    (r.below(2) as u32 * msvm_rt::abi::MSVM_ATTR_THRASH_OFF)
                        | (r.below(2) as u32 * msvm_rt::abi::MSVM_ATTR_ACCESS_OFF)
                        | (r.below(2) as u32 * msvm_rt::abi::MSVM_ATTR_READ_MOSTLY)
                } else {
                    small(r)
                },
                ..Default::default()
            };
            if !valid && r.below(8) == 0 {
                a.reserved[r.below(2) as usize] = r.next();
            }
            let res = err(dev.set_attr_raw(&mut a));
            (
                "SET_ATTR",
                res,
                memory_ioctl_errno(res) || res == Err(Errno::ENOLINK),
            )
        }
        8 => {
            let (location, device) = location(r, valid);
            let mut p = DrmMsvmPrefetch {
                addr: addr(r, arena),
                length: len(r),
                location,
                device,
                flags: if valid { 0 } else { small(r) },
                ..Default::default()
            };
            if !valid && r.below(8) == 0 {
                p.pad = small(r);
                p.reserved[r.below(2) as usize] = r.next();
            }
            let res = err(dev.prefetch_raw(&mut p));
            (
                "PREFETCH",
                res,
                memory_ioctl_errno(res) || res == Err(Errno::ENOLINK),
            )
        }
        9 => {
            let mut q = DrmMsvmResidency {
                addr: addr(r, arena),
                length: len(r),
                flags: if valid { 0 } else { small(r) },
                ..Default::default()
            };
            if !valid && r.below(8) == 0 {
                let i = r.below(q.reserved.len() as u64) as usize;
                q.reserved[i] = r.next();
            }
            let res = err(dev.residency_raw(&mut q));
            ("RESIDENCY", res, memory_ioctl_errno(res))
        }
        _ => {
            let mut s = DrmMsvmStats::default();
            if !valid {
                s.reserved[0] = r.below(2);
            }
            let _ = &mut s;
            let res = err(dev.stats().map(drop));
            ("STATS", res, res.is_ok())
        }
    }
}

pub fn run(seed: u64, calls: u64, secs: u64) -> Result<(), String> {
    let gpus = sysfs::msvm_gpus()?;
    let devs: Vec<Device> = gpus
        .iter()
        .map(|g| Device::open(&g.node).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    // One reservation holds the arena, remapped under the fuzzer by the churn
    // thread, between two PROT_NONE guards, and right above them the data
    // the fuzzer keeps on the side. A call may start anywhere in the arena
    // and run past its ends (up to 64 pages, or unbounded); a guard stops
    // any engine job there, so nothing the fuzzer does writes the kept data,
    // however close to the arena it is. The arena is 2 MiB aligned, so THPs
    // can form in it.
    // SAFETY: a fresh anonymous mapping, only touched through raw addresses.
    let span = unsafe {
        mmap_anonymous(
            None,
            NonZeroUsize::new(GUARD + ARENA + GUARD + KEEP + HUGE).unwrap(),
            ProtFlags::PROT_NONE,
            MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE,
        )
    }
    .map_err(|e| e.to_string())?
    .as_ptr() as usize;
    let arena = (span + GUARD).next_multiple_of(HUGE);
    // SAFETY: replaces the middle of our own reservation.
    unsafe {
        mmap_anonymous(
            NonZeroUsize::new(arena),
            NonZeroUsize::new(ARENA).unwrap(),
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_PRIVATE | MapFlags::MAP_FIXED,
        )
    }
    .map_err(|e| e.to_string())?;
    // Data the fuzzer only ever moves, through files of its own (the fuzzed
    // ones lose their VM at random): it must survive everything.
    let keepers = svm::every_gpu_with_vm()?;
    // SAFETY: the tail of our reservation, used by nothing else.
    let mut keep = unsafe { Map::over(arena + ARENA + GUARD, KEEP) }?;
    fill(keep.bytes_mut(), seed ^ 0x5eed);
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let succeeded = AtomicU64::new(0);
    let bad = AtomicU64::new(0);
    let deadline = Instant::now() + Duration::from_secs(secs);
    std::thread::scope(|s| -> Result<(), String> {
        // Churn: remap, protect and populate arena pages.
        s.spawn(|| {
            let mut r = Rng(seed ^ 0xc4u64);
            while !stop.load(Ordering::Relaxed) {
                let off = r.below((ARENA / PAGE) as u64 - 16) as usize * PAGE;
                let n = (1 + r.below(16)) as usize * PAGE;
                let p = NonNull::new((arena + off) as *mut std::ffi::c_void).unwrap();
                // SAFETY: only the arena is changed; the fuzzer touches it
                // through the kernel only, where any state is legal input.
                unsafe {
                    match r.below(4) {
                        0 => {
                            let _ = munmap(p, n);
                            let _ = mmap_anonymous(
                                NonZeroUsize::new(arena + off),
                                NonZeroUsize::new(n).unwrap(),
                                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                                MapFlags::MAP_PRIVATE | MapFlags::MAP_FIXED,
                            );
                        }
                        1 => {
                            let prot = r.pick(&[ProtFlags::PROT_NONE, ProtFlags::PROT_READ]);
                            let _ = mprotect(p, n, prot);
                        }
                        2 => {
                            let _ = mprotect(p, n, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE);
                        }
                        _ => {}
                    }
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let mut workers = Vec::new();
        let ndev = devs.len() as u64;
        let devs = &devs;
        for (t, (dev, keeper)) in devs.iter().zip(keepers.iter()).enumerate() {
            let (done, bad, succeeded) = (&done, &bad, &succeeded);
            let (keep_addr, keep_len) = (keep.addr(), keep.len());
            workers.push(s.spawn(move || -> Result<(), String> {
                let mut r = Rng(seed.wrapping_add(t as u64 * 0x9e37_79b9) | 1);
                let per = calls / ndev;
                for i in 0..per {
                    if Instant::now() > deadline {
                        break;
                    }
                    if i % 997 == 0 {
                        let to = if r.below(2) == 0 {
                            Location::Device
                        } else {
                            Location::System
                        };
                        keeper
                            .migrate(keep_addr, keep_len, to)
                            .map_err(|e| format!("keep: {e}"))?;
                    }
                    let (name, res, ok) = call(&mut r, dev, arena);
                    if !ok {
                        bad.fetch_add(1, Ordering::Relaxed);
                        println!("# fuzz: {name} returned undocumented {res:?}");
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                    if res.is_ok() {
                        succeeded.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(())
            }));
        }
        // msvm's ioctl numbers on another driver's file: refused by it.
        if let Ok(null) = std::fs::File::open("/dev/null") {
            let mut q = DrmMsvmQuery::default();
            // SAFETY: a valid argument; /dev/null does not know the request.
            let r = unsafe {
                abi::drm_ioctl_msvm_query(std::os::fd::AsRawFd::as_raw_fd(&null), &mut q)
            };
            if r.is_ok() {
                bad.fetch_add(1, Ordering::Relaxed);
                println!("# fuzz: QUERY on /dev/null succeeded");
            }
        }
        // Forked children use inherited files: their VM calls are refused.
        for _ in 0..4 {
            // SAFETY: the child makes ioctls on inherited files and exits.
            match unsafe { fork() }.map_err(|e| e.to_string())? {
                ForkResult::Child => {
                    let mut r = Rng(seed ^ 0xf0f0);
                    let mut fine = true;
                    for _ in 0..200 {
                        let (_, res, ok) = call(&mut r, &devs[0], arena);
                        fine &= ok && res != Err(Errno::EIO);
                    }
                    // SAFETY: leaving the child at once.
                    unsafe { nix::libc::_exit(if fine { 0 } else { 1 }) };
                }
                ForkResult::Parent { child } => {
                    let _ = waitpid(child, None);
                }
            }
        }
        let mut res = Ok(());
        for w in workers {
            if let Err(e) = w
                .join()
                .map_err(|_| "worker panicked".to_string())
                .and_then(|x| x)
            {
                res = Err(e);
            }
        }
        stop.store(true, Ordering::Relaxed);
        res
    })?;
    verify(keep.bytes(), seed ^ 0x5eed).map_err(|e| format!("kept data: {e}"))?;
    let (n, b) = (done.load(Ordering::Relaxed), bad.load(Ordering::Relaxed));
    println!(
        "# fuzz: seed {seed}: {n} calls on {} devices ({} succeeded), {b} undocumented errnos",
        devs.len(),
        succeeded.load(Ordering::Relaxed)
    );
    if b != 0 {
        return Err(format!("{b} undocumented errnos"));
    }
    Ok(())
}
