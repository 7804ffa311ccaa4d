//! Trust: no path from user space to corrupted memory, a kernel oops or an
//! unkillable task. Each test here reproduces a path that once broke one of
//! those promises.

use std::num::NonZeroUsize;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use msvm_rt::{Device, Exec, Location, Place};
use nix::errno::Errno;
use nix::sys::mman::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm::{fill, gpu0, verify, Map, PAGE};

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "trust_secretmem_is_never_touched",
            run: secretmem_is_never_touched,
        },
        Test {
            name: "trust_pfnmap_vvar_is_refused",
            run: pfnmap_vvar_is_refused,
        },
        Test {
            name: "trust_round_trip_and_in_place_writes_keep_every_word",
            run: round_trip_and_in_place_writes,
        },
        Test {
            name: "trust_huge_range_ioctls_die_on_sigkill",
            run: huge_range_ioctls_die_on_sigkill,
        },
        Test {
            name: "trust_own_zap_during_whole_folio_moves",
            run: own_zap_during_whole_folio_moves,
        },
        Test {
            name: "trust_fault_split_races_own_zap",
            run: fault_split_races_own_zap,
        },
        Test {
            name: "trust_chunk_creation_and_sysfs_readdir_lock_order",
            run: chunk_creation_and_sysfs_readdir,
        },
    ]
}

/// A migration that needs a new chunk (a pagemap: `memremap_pages`, which
/// takes the CPU hotplug lock), then a read of a sysfs directory whose
/// entries land in a 2 MiB device folio: the fault that brings the folio to
/// system RAM takes `mmap_lock` for writing under kernfs's lock, and CPU
/// hotplug creates sysfs directories under the CPU hotplug lock. msvm must
/// never create a pagemap under `mmap_lock`, or under a lock it takes with
/// `mmap_lock` held: that closes a lock cycle, which lockdep reports (the run
/// fails on the report; it did, found by `make soak`).
fn chunk_creation_and_sysfs_readdir() -> Outcome {
    use std::os::fd::AsRawFd;
    let dev = gpu0()?;
    // No idle chunk to reuse: the migrations below must create one.
    crate::lifecycle::shrink("idle")?;
    let s0 = dev.stats().map_err(e)?;
    let len = 1 << 20;
    let mut held = Vec::new();
    while dev.stats().map_err(e)?.chunks_created == s0.chunks_created {
        check!(
            (held.len() * len) as u64 <= s0.vram_size,
            "no chunk created for {} MiB",
            held.len()
        );
        let mut m = Map::small(len)?;
        fill(m.bytes_mut(), 71 + held.len() as u64);
        dev.migrate(m.addr(), len, Location::Device).map_err(e)?;
        held.push(m);
    }
    // Two THPs; the second goes to the device whole.
    let huge = 2 << 20;
    let (_region, start) = crate::large::thp_region(2 * huge, 70)?;
    let s1 = dev.stats().map_err(e)?;
    dev.migrate(start + huge, huge, Location::Device)
        .map_err(e)?;
    let s2 = dev.stats().map_err(e)?;
    check!(
        s2.large_to_device == s1.large_to_device + 1,
        "the 2 MiB folio did not move whole"
    );
    // "." and ".." (48 bytes) go in at the end of the first THP, before
    // kernfs's lock is taken; the entries after them, under it, into the
    // device folio.
    let at = start + huge - 48;
    let dir = std::fs::File::open("/sys/bus/pci/devices").map_err(e)?;
    // SAFETY: the kernel writes at most `PAGE` bytes at `at`, inside
    // `_region`, ours and alive.
    let n = unsafe { nix::libc::syscall(nix::libc::SYS_getdents64, dir.as_raw_fd(), at, PAGE) };
    check!(n > 48, "getdents64: {n}");
    let s3 = dev.stats().map_err(e)?;
    check!(
        s3.cpu_faults > s2.cpu_faults,
        "the read did not fault the folio to system RAM"
    );
    let mut want = vec![0u8; 2 * huge];
    fill(&mut want, 70);
    let got = crate::large::bytes(start, 2 * huge);
    let end = at - start + n as usize;
    check!(
        got[..at - start] == want[..at - start] && got[end..] == want[end..],
        "bytes around the directory entries changed"
    );
    for (k, m) in held.iter().enumerate() {
        verify(m.bytes(), 71 + k as u64)?;
    }
    Ok(())
}

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// The errno of a failed call, or what it returned instead.
fn errno_of<T: std::fmt::Debug>(r: msvm_rt::Result<T>) -> Result<Errno, String> {
    match r {
        Ok(v) => Err(format!("succeeded: {v:?}")),
        Err(err) => err.errno().ok_or_else(|| err.to_string()),
    }
}

/// Memory from `memfd_secret()` is not in the kernel's direct map: a
/// migration or a job that read it through the kernel would oops. Migrations
/// count its pages busy; jobs fail with `EFAULT`, in place or not; its bytes
/// stay.
fn secretmem_is_never_touched() -> Outcome {
    let dev = gpu0()?;
    let len = 16 * PAGE;
    let n = (len / PAGE) as u64;
    // SAFETY: a plain system call with no pointer arguments.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_memfd_secret, 0) };
    check!(fd >= 0, "memfd_secret: {}", Errno::last());
    // SAFETY: the system call just returned this new descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    nix::unistd::ftruncate(&fd, len as i64).map_err(e)?;
    // SAFETY: mapping our own secretmem file.
    let p = unsafe {
        mmap(
            None,
            NonZeroUsize::new(len).ok_or("empty")?,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
            fd.as_fd(),
            0,
        )
    }
    .map_err(e)?;
    let addr = p.as_ptr() as usize;
    // SAFETY: the mapping is ours, `len` bytes, readable and writable.
    let b = unsafe { std::slice::from_raw_parts_mut(p.as_ptr().cast::<u8>(), len) };
    fill(b, 31);
    let res = (|| -> Outcome {
        let out = dev.migrate(addr, len, Location::Device).map_err(e)?;
        check!(out.busy == n && out.moved == 0, "MIGRATE: {out:?}");
        let out = dev.prefetch(addr, len, Place::Here).map_err(e)?;
        check!(out.busy == n && out.moved == 0, "PREFETCH: {out:?}");
        let out = dev.migrate(addr, len, Location::System).map_err(e)?;
        check!(out.moved == 0, "MIGRATE to system: {out:?}");
        for in_place in [true, false] {
            for job in [Exec::Checksum, Exec::Fill(7), Exec::AtomicAdd(1)] {
                let got = errno_of(dev.exec(job, addr, len, in_place))
                    .map_err(|w| format!("EXEC {job:?} in_place={in_place}: {w}"))?;
                check!(
                    got == Errno::EFAULT,
                    "EXEC {job:?} in_place={in_place}: {got}, want EFAULT"
                );
            }
        }
        // A copy with the secret memory as its source.
        let mut other = Map::new(len)?;
        other.bytes_mut().fill(1);
        let got = errno_of(dev.exec(Exec::Copy { src: addr }, other.addr(), len, true))?;
        check!(got == Errno::EFAULT, "EXEC COPY from secretmem: {got}");
        verify(b, 31)
    })();
    // SAFETY: our mapping, no longer borrowed.
    unsafe { munmap(p, len) }.map_err(e)?;
    res
}

/// `[vvar]` is an I/O, PFN mapping (no `struct page` the kernel may use):
/// jobs fail with `EFAULT`, migrations count it busy.
fn pfnmap_vvar_is_refused() -> Outcome {
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(e)?;
    let line = maps
        .lines()
        .find(|l| l.ends_with("[vvar]"))
        .ok_or("no [vvar] mapping in /proc/self/maps")?;
    let range = line.split_whitespace().next().ok_or("bad maps line")?;
    let (a, z) = range.split_once('-').ok_or("bad maps range")?;
    let start = usize::from_str_radix(a, 16).map_err(e)?;
    let end = usize::from_str_radix(z, 16).map_err(e)?;
    let dev = gpu0()?;
    let got = errno_of(dev.exec(Exec::Checksum, start, end - start, true))?;
    check!(got == Errno::EFAULT, "EXEC CHECKSUM on [vvar]: {got}");
    let out = dev
        .migrate(start, end - start, Location::Device)
        .map_err(e)?;
    check!(
        out.moved == 0 && out.busy == ((end - start) / PAGE) as u64,
        "MIGRATE of [vvar]: {out:?}"
    );
    Ok(())
}

/// Words of `buf` that differ from `want`.
fn wrong_words(buf: &[u8], want: &[u8]) -> usize {
    buf.chunks(8)
        .zip(want.chunks(8))
        .filter(|(a, b)| a != b)
        .count()
}

/// A 16 MiB round trip through the device, then in-place engine writes to
/// system RAM (DMA), then device writes: every word is what it must be.
/// With bounce buffers (`swiotlb=force`, confidential guests) a copy or a
/// write through the CPU while the page is mapped for DMA is lost at the
/// unmap unless the mapping is synced.
fn round_trip_and_in_place_writes() -> Outcome {
    let dev = gpu0()?;
    let len = 16 << 20;
    let mut m = Map::new(len)?;
    fill(m.bytes_mut(), 41);
    let mut want = vec![0u8; len];
    fill(&mut want, 41);
    dev.migrate(m.addr(), len, Location::Device).map_err(e)?;
    dev.migrate(m.addr(), len, Location::System).map_err(e)?;
    let bad = wrong_words(m.bytes(), &want);
    check!(bad == 0, "round trip: {bad} of {} words wrong", len / 8);
    // In place, in RAM: DMA writes.
    dev.exec(Exec::Fill(0x5a5a_5a5a_0000_0001), m.addr(), len, true)
        .map_err(e)?;
    let want: Vec<u8> = std::iter::repeat_n(0x5a5a_5a5a_0000_0001u64.to_ne_bytes(), len / 8)
        .flatten()
        .collect();
    let bad = wrong_words(m.bytes(), &want);
    check!(bad == 0, "in-place FILL: {bad} of {} words wrong", len / 8);
    dev.exec(Exec::AtomicAdd(2), m.addr(), len, true)
        .map_err(e)?;
    let want: Vec<u8> = std::iter::repeat_n(0x5a5a_5a5a_0000_0003u64.to_ne_bytes(), len / 8)
        .flatten()
        .collect();
    let bad = wrong_words(m.bytes(), &want);
    check!(
        bad == 0,
        "in-place ATOMIC_ADD: {bad} of {} words wrong",
        len / 8
    );
    let h = msvm_rt::checksum(m.bytes());
    let sum = dev.exec(Exec::Checksum, m.addr(), len, true).map_err(e)?;
    check!(sum.result == h, "in-place CHECKSUM differs from the CPU's");
    // On the device, then back to system RAM by CPU faults.
    dev.exec(Exec::AtomicAdd(4), m.addr(), len, false)
        .map_err(e)?;
    let want: Vec<u8> = std::iter::repeat_n(0x5a5a_5a5a_0000_0007u64.to_ne_bytes(), len / 8)
        .flatten()
        .collect();
    let bad = wrong_words(m.bytes(), &want);
    check!(
        bad == 0,
        "after the device's ATOMIC_ADD: {bad} of {} words wrong",
        len / 8
    );
    Ok(())
}

/// What a child runs over a 64 TiB `MAP_NORESERVE` mapping.
#[derive(Clone, Copy, Debug)]
pub enum Huge {
    Migrate,
    Prefetch,
    Exec,
    /// A PREFETCH, through the second GPU, to the first (its P2P peer):
    /// the ioctl holds the first GPU's memory for its whole run.
    PrefetchToPeer,
}

const HUGE_LEN: usize = 64 << 40;

/// A child that starts `op` over a 64 TiB mapping and reports, through the
/// pipe, once it is about to call it. Exits 3 if the ioctl ever returns (4
/// for [`Huge::PrefetchToPeer`] stopped with `EAGAIN`).
pub fn huge_child(op: Huge) -> Result<(nix::unistd::Pid, OwnedFd), String> {
    let (rd, wr) = nix::unistd::pipe().map_err(e)?;
    // SAFETY: the child only opens a device, maps memory and makes ioctls.
    match unsafe { fork() }.map_err(e)? {
        ForkResult::Child => {
            drop(rd);
            let run = || -> Result<(), String> {
                let (dev, peer) = if matches!(op, Huge::PrefetchToPeer) {
                    let gpus = crate::sysfs::msvm_gpus()?;
                    let (g0, g1) = (gpus.first().ok_or("no GPU")?, gpus.get(1).ok_or("one GPU")?);
                    let dev = msvm_rt::Device::open(&g1.node).map_err(e)?;
                    dev.vm_create().map_err(e)?;
                    let peer = msvm_rt::Device::open(&g0.node).map_err(e)?;
                    (dev, peer.index().map_err(e)?)
                } else {
                    (gpu0()?, 0)
                };
                // SAFETY: a fresh anonymous mapping aliases nothing.
                let p = unsafe {
                    mmap_anonymous(
                        None,
                        NonZeroUsize::new(HUGE_LEN).ok_or("empty")?,
                        ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                        MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE,
                    )
                }
                .map_err(e)?;
                // 4 KiB pages: a 2 MiB device folio evicted while its
                // process exits meets Linux 7.3's zap bug, which eviction
                // cannot avoid yet (see the design document), and the
                // unbind test evicts this process's pages as it exits.
                // SAFETY: advice on our own mapping.
                unsafe {
                    nix::sys::mman::madvise(
                        p,
                        HUGE_LEN,
                        nix::sys::mman::MmapAdvise::MADV_NOHUGEPAGE,
                    )
                }
                .map_err(e)?;
                let addr = p.as_ptr() as usize;
                nix::unistd::write(&wr, b"x").map_err(e)?;
                let r = match op {
                    Huge::Migrate => dev.migrate(addr, HUGE_LEN, Location::Device).map(drop),
                    Huge::Prefetch => dev.prefetch(addr, HUGE_LEN, Place::Here).map(drop),
                    Huge::Exec => dev.exec(Exec::Checksum, addr, HUGE_LEN, false).map(drop),
                    Huge::PrefetchToPeer => {
                        let r = dev.prefetch(addr, HUGE_LEN, Place::Device(peer));
                        // Stopped because a GPU began to go away: exit 4.
                        if r.as_ref().err().and_then(|x| x.errno())
                            == Some(nix::errno::Errno::EAGAIN)
                        {
                            println!("# child: {op:?} returned: {r:?}");
                            // SAFETY: leaving the child at once.
                            unsafe { nix::libc::_exit(4) };
                        }
                        r.map(drop)
                    }
                };
                Err(format!("{op:?} returned: {r:?}"))
            };
            let _ = run().map_err(|w| println!("# child: {w}"));
            // SAFETY: leaving the child at once.
            unsafe { nix::libc::_exit(3) };
        }
        ForkResult::Parent { child } => {
            drop(wr);
            Ok((child, rd))
        }
    }
}

/// Waits up to `limit` for `pid` to end; returns how it ended and when.
pub fn reap_within(pid: nix::unistd::Pid, limit: Duration) -> Option<(WaitStatus, Duration)> {
    let t = Instant::now();
    while t.elapsed() < limit {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(10)),
            Ok(st) => return Some((st, t.elapsed())),
            Err(_) => return None,
        }
    }
    None
}

/// How long a killed process may take to go.
const KILL_BOUND: Duration = Duration::from_secs(5);

/// MIGRATE, PREFETCH and EXEC over a 64 TiB `MAP_NORESERVE` mapping run for
/// a long time (32 million 2 MiB steps, hours); SIGKILL ends the process
/// within seconds (under 0.5 s on an idle machine; the bound is 5 s, which
/// a loaded 2-core TCG guest meets too), and the device's memory it took
/// comes back.
fn huge_range_ioctls_die_on_sigkill() -> Outcome {
    let before = gpu0()?.stats().map_err(e)?.resident;
    for op in [Huge::Migrate, Huge::Prefetch, Huge::Exec] {
        let (pid, rd) = huge_child(op)?;
        let mut b = [0u8; 1];
        let got = nix::unistd::read(&rd, &mut b).map_err(e)?;
        check!(got == 1, "{op:?}: the child did not start");
        std::thread::sleep(Duration::from_secs(2));
        if let Some((st, _)) = reap_within(pid, Duration::from_millis(1)) {
            return Err(format!("{op:?}: the child ended by itself: {st:?}"));
        }
        kill(pid, Signal::SIGKILL).map_err(e)?;
        match reap_within(pid, KILL_BOUND) {
            Some((WaitStatus::Signaled(_, Signal::SIGKILL, _), t)) => {
                println!("# {op:?}: gone {} ms after SIGKILL", t.as_millis());
            }
            Some((st, _)) => return Err(format!("{op:?}: the child ended as {st:?}")),
            None => {
                let late = reap_within(pid, Duration::from_secs(30));
                return Err(format!(
                    "{op:?}: still there {} s after SIGKILL (then: {:?})",
                    KILL_BOUND.as_secs(),
                    late.map(|(s, t)| (s, t + KILL_BOUND))
                ));
            }
        }
    }
    // The killed processes' device memory is free again.
    let dev: Device = gpu0()?;
    let t = Instant::now();
    let mut resident = dev.stats().map_err(e)?.resident;
    while resident > before && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
        resident = dev.stats().map_err(e)?.resident;
    }
    check!(
        resident <= before,
        "{resident} pages on gpu0, {before} before the children"
    );
    Ok(())
}

/// Rewrites `[start, start + len)` with `fill(seed)` after
/// `MADV_DONTNEED` (a zap of this process's own page tables, under the
/// mmap read lock), then checks it reads back.
fn zap_and_rewrite(start: usize, len: usize, seed: u64) -> Result<(), String> {
    let p = std::ptr::NonNull::new(start as *mut std::ffi::c_void).ok_or("null")?;
    // SAFETY: advice on a range of a mapping the caller keeps alive.
    unsafe { nix::sys::mman::madvise(p, len, nix::sys::mman::MmapAdvise::MADV_DONTNEED) }
        .map_err(e)?;
    // SAFETY: the range is readable and writable, and only this thread
    // writes it.
    fill(
        unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) },
        seed,
    );
    verify(crate::large::bytes(start, len), seed).map_err(|w| format!("after rewrite: {w}"))
}

/// Round trips of a third buffer through the device, checked every time:
/// a VRAM block owned twice shows up as wrong bytes here. Runs until
/// `stop`; returns the round trips made.
fn checked_round_trips(stop: &AtomicBool, seed: u64) -> Result<u64, String> {
    let dev = gpu0()?;
    let len = 4 << 20;
    let (_c, c) = crate::large::thp_region(len, seed)?;
    let mut rounds = 0;
    while !stop.load(Ordering::Relaxed) {
        let k = seed + rounds;
        // SAFETY: our region, written by this thread only.
        fill(
            unsafe { std::slice::from_raw_parts_mut(c as *mut u8, len) },
            k,
        );
        dev.migrate(c, len, Location::Device).map_err(e)?;
        dev.migrate(c, len, Location::System).map_err(e)?;
        verify(crate::large::bytes(c, len), k).map_err(|w| format!("round {rounds}: {w}"))?;
        rounds += 1;
    }
    Ok(rounds)
}

/// One thread moves 2 MiB device folios whole to the device and back while
/// another zaps and rewrites the same range (`MADV_DONTNEED`: on Linux
/// 7.3 a zap of a device folio's PMD migration entry frees the folio under
/// the move, and its VRAM block gets a second owner); a third buffer's
/// round trips check their bytes. Every byte written is read back.
fn own_zap_during_whole_folio_moves() -> Outcome {
    let len = 8 << 20;
    let (_a, a) = crate::large::thp_region(len, 61)?;
    let stop = AtomicBool::new(false);
    let secs = Duration::from_secs(8);
    std::thread::scope(|s| -> Outcome {
        let mover = s.spawn(|| -> Result<u64, String> {
            let dev = gpu0()?;
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                dev.migrate(a, len, Location::Device).map_err(e)?;
                dev.migrate(a, len, Location::System).map_err(e)?;
                n += 1;
            }
            Ok(n)
        });
        let zapper = s.spawn(|| -> Result<u64, String> {
            let p = std::ptr::NonNull::new(a as *mut std::ffi::c_void).ok_or("null")?;
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                // Mostly bare zaps (a zapped block still moves: a hole
                // becomes a device folio), and now and then a rewrite
                // whose bytes must read back.
                if n % 16 == 15 {
                    zap_and_rewrite(a, len, 62 + n % 7)?;
                } else {
                    // SAFETY: advice on our own region.
                    unsafe {
                        nix::sys::mman::madvise(p, len, nix::sys::mman::MmapAdvise::MADV_DONTNEED)
                    }
                    .map_err(e)?;
                }
                n += 1;
            }
            Ok(n)
        });
        let checker = s.spawn(|| checked_round_trips(&stop, 63));
        std::thread::sleep(secs);
        stop.store(true, Ordering::Relaxed);
        let moves = mover.join().map_err(|_| "mover panicked")??;
        let zaps = zapper.join().map_err(|_| "zapper panicked")??;
        let rounds = checker.join().map_err(|_| "checker panicked")??;
        println!("# {moves} round trips moved, {zaps} zaps, {rounds} checked round trips");
        check!(
            moves > 0 && zaps > 0 && rounds > 0,
            "a thread made no progress"
        );
        Ok(())
    })
}

/// With no 2 MiB system folio to be had, a CPU fault on a 2 MiB device
/// folio splits it (dropping the fault's reference on the way, which the
/// core's split requires) while another thread zaps the range: the folio
/// must not be freed under the fault. Every byte written is read back, and
/// the zapped range reads as zero.
fn fault_split_races_own_zap() -> Outcome {
    let dev = gpu0()?;
    let len = 4 << 20;
    let (_a, a) = crate::large::thp_region(len, 71)?;
    let t = Instant::now();
    let mut rounds = 0u64;
    let res = (|| -> Outcome {
        while t.elapsed() < Duration::from_secs(6) {
            let seed = 72 + rounds % 5;
            zap_and_rewrite(a, len, seed)?;
            dev.migrate(a, len, Location::Device).map_err(e)?;
            crate::large::fail_large_system(1 << 20)?;
            std::thread::scope(|s| -> Outcome {
                // A CPU read of each folio: PMD faults that split.
                let reader = s.spawn(|| {
                    (0..len / (2 << 20))
                        .map(|i| {
                            // SAFETY: inside the region, kept alive.
                            u64::from(unsafe {
                                std::ptr::read_volatile((a + i * (2 << 20) + 4096 * 9) as *const u8)
                            })
                        })
                        .sum::<u64>()
                });
                let p = std::ptr::NonNull::new(a as *mut std::ffi::c_void).ok_or("null")?;
                // SAFETY: advice on our own region.
                unsafe {
                    nix::sys::mman::madvise(p, len, nix::sys::mman::MmapAdvise::MADV_DONTNEED)
                }
                .map_err(e)?;
                reader.join().map_err(|_| "reader panicked")?;
                Ok(())
            })?;
            crate::large::fail_large_system(0)?;
            // The zap covered the whole range: whatever the reader brought
            // back before it is gone, whatever it faulted after is zero.
            let b = crate::large::bytes(a, len);
            let nonzero = b.iter().filter(|&&x| x != 0).count();
            check!(
                nonzero == 0,
                "round {rounds}: {nonzero} bytes not zero after the zap"
            );
            rounds += 1;
        }
        Ok(())
    })();
    crate::large::fail_large_system(0)?;
    println!("# {rounds} rounds");
    res
}
