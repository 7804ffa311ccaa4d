//! 2 MiB folios: a THP moves into one 2 MiB device folio and comes back as
//! one THP (explicitly, or by one CPU fault); device folios split by
//! munmap, mprotect and fork keep every byte; a peer takes a device folio
//! whole over P2P; with no free 2 MiB block of VRAM, the folio moves in
//! 4 KiB pages. The guest kernel runs with THP "always", so the kernel
//! backs 2 MiB-aligned anonymous memory with THPs; `AnonHugePages` in
//! smaps says how many it gave.

use std::ptr::NonNull;

use msvm_rt::{Device, Exec, Location, Stats};
use nix::sys::mman::{madvise, mprotect, munmap, MmapAdvise, ProtFlags};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::scenarios::huge;
use crate::svm::{every_gpu_with_vm, fill, gpu0, stats, verify, PAGE};

const HUGE: usize = 2 << 20;

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "large_folio_round_trip_whole",
            run: round_trip_whole,
        },
        Test {
            name: "large_folio_split_by_munmap_and_mprotect",
            run: split_by_munmap_mprotect,
        },
        Test {
            name: "large_folio_fork_cow",
            run: fork_cow,
        },
        Test {
            name: "large_folio_to_peer_whole",
            run: to_peer_whole,
        },
        Test {
            name: "large_folio_small_pages_without_free_block",
            run: fallback_without_block,
        },
        Test {
            name: "large_folio_to_system_in_small_pages_without_free_folio",
            run: to_system_without_free_folio,
        },
        Test {
            name: "engine_write_keeps_fork_child_copy",
            run: engine_write_keeps_child_copy,
        },
        Test {
            name: "large_folio_shared_with_fork_child_moves_split",
            run: shared_with_child_moves_split,
        },
    ]
}

fn e(x: msvm_rt::Error) -> String {
    x.to_string()
}

/// THPs (`AnonHugePages`) in the mapping that contains `addr`.
pub(crate) fn thps_at(addr: usize) -> Result<u64, String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").map_err(|x| x.to_string())?;
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                inside = a <= addr && addr < b;
                continue;
            }
        }
        if inside {
            if let Some(kb) = line.strip_prefix("AnonHugePages:") {
                let kb: u64 = kb
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .map_err(|_| format!("smaps: {line}"))?;
                return Ok(kb * 1024 / HUGE as u64);
            }
        }
    }
    Err(format!("no mapping at {addr:#x} in smaps"))
}

/// `len` bytes of THP-backed memory filled from `seed`; fails unless the
/// kernel backed all of it with THPs.
pub(crate) fn thp_region(len: usize, seed: u64) -> Result<(crate::scenarios::Raw, usize), String> {
    let (big, start) = huge(len)?;
    // SAFETY: inside `big`, readable and writable.
    let b = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) };
    fill(b, seed);
    let n = thps_at(start)?;
    check!(
        n == (len / HUGE) as u64,
        "the guest gave {n} THPs for {} (THP \"always\" expected)",
        len / HUGE
    );
    Ok((big, start))
}

pub(crate) fn bytes<'a>(start: usize, len: usize) -> &'a [u8] {
    // SAFETY: callers pass a readable range of a mapping they keep alive
    // while the slice is used.
    unsafe { std::slice::from_raw_parts(start as *const u8, len) }
}

fn delta(a: &Stats, b: &Stats) -> (u64, u64, u64) {
    (
        b.large_to_device - a.large_to_device,
        b.large_to_system - a.large_to_system,
        b.large_fallback - a.large_fallback,
    )
}

/// 8 MiB of THPs: to the device as four 2 MiB device folios, changed by
/// the engine, back to system RAM explicitly as four THPs, to the device
/// again, and back by one CPU fault per folio.
fn round_trip_whole() -> Outcome {
    let dev = gpu0()?;
    let len = 8 << 20;
    let n = (len / HUGE) as u64;
    let (_big, start) = thp_region(len, 81)?;
    let s0 = stats(&dev)?;
    let out = dev.migrate(start, len, Location::Device).map_err(e)?;
    check!(out.moved == (len / PAGE) as u64, "to device: {out:?}");
    let s1 = stats(&dev)?;
    check!(
        delta(&s0, &s1) == (n, 0, 0),
        "to device: large to_device/to_system/fallback {:?}",
        delta(&s0, &s1)
    );
    dev.exec(Exec::AtomicAdd(5), start, len, false).map_err(e)?;
    let out = dev.migrate(start, len, Location::System).map_err(e)?;
    check!(out.moved == (len / PAGE) as u64, "to system: {out:?}");
    let s2 = stats(&dev)?;
    let (_, whole, fallback) = delta(&s1, &s2);
    check!(whole + fallback == n, "whole {whole} + fallback {fallback}");
    check!(
        thps_at(start)? == whole,
        "THPs back in system RAM: {whole} expected"
    );
    let mut want = vec![0u8; len];
    fill(&mut want, 81);
    for w in want.chunks_mut(8) {
        let x = u64::from_ne_bytes(w.try_into().unwrap()).wrapping_add(5);
        w.copy_from_slice(&x.to_ne_bytes());
    }
    check!(
        bytes(start, len) == &want[..],
        "data after explicit migration to system"
    );
    // Again to the device, back by CPU faults: one per folio.
    dev.migrate(start, len, Location::Device).map_err(e)?;
    let s3 = stats(&dev)?;
    let mut sum = 0u64;
    for i in 0..len / HUGE {
        // SAFETY: inside the region.
        sum += u64::from(unsafe { std::ptr::read_volatile((start + i * HUGE + 100) as *const u8) });
    }
    let s4 = stats(&dev)?;
    let faults = s4.cpu_faults - s3.cpu_faults;
    let (_, whole, fallback) = delta(&s3, &s4);
    check!(
        whole + fallback == n && faults == n,
        "fault-back: {faults} faults, {whole} whole, {fallback} split (sum {sum})"
    );
    check!(bytes(start, len) == &want[..], "data after fault-back");
    check!(
        s4.resident == s0.resident,
        "resident {} -> {}",
        s0.resident,
        s4.resident
    );
    Ok(())
}

/// A device folio partly unmapped and partly write-protected is split by
/// the core: every byte left comes back right, and no device page is left
/// behind.
fn split_by_munmap_and_mprotect_inner(dev: &Device, start: usize) -> Outcome {
    let len = 2 * HUGE;
    let r0 = stats(dev)?.resident;
    let s0 = stats(dev)?;
    dev.migrate(start, len, Location::Device).map_err(e)?;
    check!(
        stats(dev)?.large_to_device - s0.large_to_device == 2,
        "not moved as 2 folios"
    );
    let hole = start + 7 * PAGE;
    // SAFETY: one page of our own mapping; nothing refers to it.
    unsafe { munmap(NonNull::new(hole as *mut _).unwrap(), PAGE) }.map_err(|x| x.to_string())?;
    // The page is freed once its folio is split (at once, or when its
    // other pages leave it).
    let r1 = stats(dev)?.resident;
    check!(
        r1 <= r0 + (len / PAGE) as u64,
        "resident {r0} -> {r1} after unmapping one page of a device folio"
    );
    let ro = NonNull::new((start + HUGE) as *mut std::ffi::c_void).unwrap();
    // SAFETY: half of the second folio of our own mapping.
    unsafe { mprotect(ro, HUGE / 2, ProtFlags::PROT_READ) }.map_err(|x| x.to_string())?;
    let mut want = vec![0u8; len];
    fill(&mut want, 82);
    let got = bytes(start, 7 * PAGE);
    check!(got == &want[..7 * PAGE], "before the hole");
    let got = bytes(hole + PAGE, len - 8 * PAGE);
    check!(got == &want[8 * PAGE..], "after the hole");
    let r2 = stats(dev)?.resident;
    check!(r2 == r0, "resident {r0} -> {r2} after reading everything");
    Ok(())
}

fn split_by_munmap_mprotect() -> Outcome {
    let dev = gpu0()?;
    let (_big, start) = thp_region(2 * HUGE, 82)?;
    split_by_munmap_and_mprotect_inner(&dev, start)
}

/// A 2 MiB device folio shared copy-on-write by a fork: the child changes
/// it through its own device, the parent's bytes stay.
fn fork_cow() -> Outcome {
    let dev = gpu0()?;
    let (_big, start) = thp_region(HUGE, 83)?;
    let s0 = stats(&dev)?;
    dev.migrate(start, HUGE, Location::Device).map_err(e)?;
    check!(
        stats(&dev)?.large_to_device - s0.large_to_device == 1,
        "not one folio"
    );
    // SAFETY: the child only reads and writes its memory, uses its own
    // device file and exits.
    match unsafe { fork() }.map_err(|x| x.to_string())? {
        ForkResult::Child => {
            let ok = (|| -> Result<(), String> {
                let d = gpu0()?;
                verify(bytes(start, HUGE), 83)?;
                d.exec(Exec::Fill(0x5a5a_5a5a_5a5a_5a5a), start, HUGE, false)
                    .map_err(e)?;
                let b = bytes(start, HUGE);
                if b.iter().all(|&x| x == 0x5a) {
                    Ok(())
                } else {
                    Err("child's fill not seen".into())
                }
            })();
            if let Err(m) = &ok {
                eprintln!("child: {m}");
            }
            std::process::exit(i32::from(ok.is_err()));
        }
        ForkResult::Parent { child } => {
            let st = waitpid(child, None).map_err(|x| x.to_string())?;
            check!(matches!(st, WaitStatus::Exited(_, 0)), "child: {st:?}");
            verify(bytes(start, HUGE), 83)
        }
    }
}

/// gpu1 takes a 2 MiB folio of gpu0 whole, BAR to BAR over P2P.
fn to_peer_whole() -> Outcome {
    let devs = every_gpu_with_vm()?;
    check!(devs.len() >= 2, "need two GPUs");
    let (d0, d1) = (&devs[0], &devs[1]);
    let (_big, start) = thp_region(2 * HUGE, 84)?;
    d0.migrate(start, 2 * HUGE, Location::Device).map_err(e)?;
    let s0 = stats(d1)?;
    let out = d1.migrate(start, 2 * HUGE, Location::Device).map_err(e)?;
    check!(out.moved == (2 * HUGE / PAGE) as u64, "to gpu1: {out:?}");
    let s1 = stats(d1)?;
    check!(
        s1.large_to_device - s0.large_to_device == 2
            && s1.from_peer - s0.from_peer == (2 * HUGE / PAGE) as u64,
        "large {} from_peer {}",
        s1.large_to_device - s0.large_to_device,
        s1.from_peer - s0.from_peer
    );
    let sum = d0.exec(Exec::Checksum, start, 2 * HUGE, true).map_err(e)?;
    let mut want = vec![0u8; 2 * HUGE];
    fill(&mut want, 84);
    check!(sum.result == msvm_rt::checksum(&want), "gpu0 reading gpu1");
    verify(bytes(start, 2 * HUGE), 84)
}

/// VRAM filled with 4 KiB pages (by MIGRATE) to 1 MiB short of full: a
/// job's placement of a THP finds no free 2 MiB block and, as a job does
/// not evict what a MIGRATE placed (`Documentation/placement.rst`), moves
/// it in 4 KiB pages, as many as fit; the job runs on the rest where it is;
/// nothing is lost.
fn fallback_without_block() -> Outcome {
    let dev = gpu0()?;
    let s = stats(&dev)?;
    let free = (s.vram_size as usize).saturating_sub(s.resident as usize * PAGE);
    check!(free > 4 * HUGE, "VRAM nearly full already");
    // Small pages only for the filler.
    let filler = crate::svm::Map::new(free - HUGE / 2)?;
    // SAFETY: advising our own mapping.
    unsafe {
        madvise(
            NonNull::new(filler.addr() as *mut _).unwrap(),
            filler.len(),
            MmapAdvise::MADV_NOHUGEPAGE,
        )
    }
    .map_err(|x| x.to_string())?;
    let mut filler = filler;
    fill(filler.bytes_mut(), 85);
    let out = dev
        .migrate(filler.addr(), filler.len(), Location::Device)
        .map_err(e)?;
    check!(out.no_vram == 0, "filler: {out:?}");
    let (_big, start) = thp_region(HUGE, 86)?;
    let want = msvm_rt::checksum(bytes(start, HUGE));
    let s0 = stats(&dev)?;
    let out = dev.exec(Exec::Checksum, start, HUGE, false).map_err(e)?;
    let s1 = stats(&dev)?;
    check!(out.result == want, "checksum");
    check!(
        delta(&s0, &s1) == (0, 0, 1),
        "large to_device/to_system/fallback {:?}",
        delta(&s0, &s1)
    );
    check!(
        out.migrated == (HUGE / 2 / PAGE) as u64
            && s1.no_vram - s0.no_vram == (HUGE / 2 / PAGE) as u64,
        "{out:?}, no_vram {} -> {}",
        s0.no_vram,
        s1.no_vram
    );
    verify(bytes(start, HUGE), 86)?;
    verify(filler.bytes(), 85)
}

/// debugfs fault injection: the next `n` 2 MiB system folio allocations
/// for device folios going to system RAM fail.
pub fn fail_large_system(n: u64) -> Result<(), String> {
    const F: &str = "/sys/kernel/debug/msvm/fail_large_system";
    std::fs::write(F, n.to_string()).map_err(|x| format!("write {F}: {x}"))
}

/// No 2 MiB system folio to be had (injected failures): a CPU fault on a
/// device folio splits it, and the access's retry brings the 64 KiB around
/// it to system RAM in 4 KiB pages (one counted fault per folio); an
/// explicit migration brings all of it; every byte arrives.
fn to_system_without_free_folio() -> Outcome {
    let dev = gpu0()?;
    let len = 4 * HUGE;
    let n = (len / HUGE) as u64;
    let (_big, start) = thp_region(len, 87)?;
    dev.migrate(start, len, Location::Device).map_err(e)?;
    let s0 = stats(&dev)?;
    check!(s0.resident >= (len / PAGE) as u64, "not on the device");
    fail_large_system(n)?;
    let mut sum = 0u64;
    for i in 0..len / HUGE {
        // SAFETY: inside the region.
        sum += u64::from(unsafe {
            std::ptr::read_volatile((start + i * HUGE + 4096 * 7) as *const u8)
        });
    }
    let s1 = stats(&dev)?;
    fail_large_system(0)?;
    // One counted fault per folio (the split moves nothing and is counted
    // as a fallback), bringing at least the 64 KiB window to system RAM.
    check!(
        s1.cpu_faults - s0.cpu_faults == n
            && delta(&s0, &s1) == (0, 0, n)
            && s1.to_system - s0.to_system >= 16 * n,
        "fault-back: {} faults, large to_device/to_system/fallback {:?}, {} pages (sum {sum})",
        s1.cpu_faults - s0.cpu_faults,
        delta(&s0, &s1),
        s1.to_system - s0.to_system
    );
    verify(bytes(start, len), 87)?;
    // Explicitly (fresh THPs: those pages came back as 4 KiB pages).
    let (_big, start) = thp_region(len, 87)?;
    dev.migrate(start, len, Location::Device).map_err(e)?;
    let s2 = stats(&dev)?;
    fail_large_system(n)?;
    let out = dev.migrate(start, len, Location::System).map_err(e);
    fail_large_system(0)?;
    let out = out?;
    let s3 = stats(&dev)?;
    check!(
        out.moved == (len / PAGE) as u64 && delta(&s2, &s3) == (0, 0, n),
        "explicit: {out:?}, large to_device/to_system/fallback {:?}",
        delta(&s2, &s3)
    );
    verify(bytes(start, len), 87)
}

/// Pages on the device shared copy-on-write with a fork child (4 KiB pages
/// and a 2 MiB folio): the parent's engine job writes them; the child, still
/// alive, keeps its copy.
fn engine_write_keeps_child_copy() -> Outcome {
    let dev = gpu0()?;
    let small = crate::svm::Map::small(16 * PAGE)?;
    let (_big, huge_start) = thp_region(HUGE, 89)?;
    for (start, len, seed) in [(small.addr(), small.len(), 88), (huge_start, HUGE, 89)] {
        // SAFETY: inside a live mapping of ours.
        let b = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) };
        fill(b, seed);
        dev.migrate(start, len, Location::Device).map_err(e)?;
        let child = WaitingChild::fork(start, len, seed)?;
        let r = dev.exec(Exec::Fill(0x7777_7777_7777_7777), start, len, false);
        let st = child.release()?;
        r.map_err(e)?;
        check!(
            bytes(start, len).iter().all(|&x| x == 0x77),
            "{len} bytes: the parent's fill is not there"
        );
        check!(
            matches!(st, WaitStatus::Exited(_, 0)),
            "{len} bytes: the child's copy changed: {st:?}"
        );
    }
    Ok(())
}

/// A fork child that shares the parent's memory until released, then
/// checks that `[start, start + len)` still holds `fill(seed)` and exits
/// with status 0 if it does.
struct WaitingChild {
    pid: nix::unistd::Pid,
    wr: std::os::fd::OwnedFd,
}

impl WaitingChild {
    fn fork(start: usize, len: usize, seed: u64) -> Result<Self, String> {
        let (rd, wr) = nix::unistd::pipe().map_err(|x| x.to_string())?;
        // SAFETY: the child only waits, reads its memory and exits.
        match unsafe { fork() }.map_err(|x| x.to_string())? {
            ForkResult::Child => {
                drop(wr);
                let mut buf = [0u8; 1];
                let _ = nix::unistd::read(&rd, &mut buf);
                let ok = verify(bytes(start, len), seed).is_ok();
                // SAFETY: leaving the child at once.
                unsafe { nix::libc::_exit(i32::from(!ok)) };
            }
            ForkResult::Parent { child } => Ok(Self { pid: child, wr }),
        }
    }

    /// Lets the child check its copy; returns how it exited.
    fn release(self) -> Result<WaitStatus, String> {
        let _ = nix::unistd::write(&self.wr, b"x");
        drop(self.wr);
        waitpid(self.pid, None).map_err(|x| x.to_string())
    }
}

/// Device folios a fork child maps too never move whole (Linux 7.3 frees
/// such a folio under the migration if the child exits meanwhile, see
/// `device_folio_shared` in the module): an explicit migration brings one
/// to system RAM in 4 KiB pages, and a CPU fault on the other splits it
/// (one fallback) and then brings its window back. Both processes keep
/// their bytes.
fn shared_with_child_moves_split() -> Outcome {
    let dev = gpu0()?;
    let (_big, start) = thp_region(2 * HUGE, 90)?;
    let s0 = stats(&dev)?;
    dev.migrate(start, 2 * HUGE, Location::Device).map_err(e)?;
    let s1 = stats(&dev)?;
    check!(
        delta(&s0, &s1) == (2, 0, 0),
        "to the device: {:?}",
        delta(&s0, &s1)
    );
    let child = WaitingChild::fork(start, 2 * HUGE, 90)?;
    let res = (|| -> Outcome {
        let out = dev.migrate(start, HUGE, Location::System).map_err(e)?;
        let s2 = stats(&dev)?;
        check!(
            out.moved == (HUGE / PAGE) as u64 && delta(&s1, &s2) == (0, 0, 0),
            "explicit: {out:?}, large to_device/to_system/fallback {:?}",
            delta(&s1, &s2)
        );
        // SAFETY: inside the region.
        let v = unsafe { std::ptr::read_volatile((start + HUGE + 7 * PAGE) as *const u8) };
        let s3 = stats(&dev)?;
        check!(
            delta(&s2, &s3) == (0, 0, 1)
                && s3.cpu_faults - s2.cpu_faults == 1
                && s3.to_system - s2.to_system >= 16,
            "fault (read {v}): large to_device/to_system/fallback {:?}, {} faults, {} pages",
            delta(&s2, &s3),
            s3.cpu_faults - s2.cpu_faults,
            s3.to_system - s2.to_system
        );
        verify(bytes(start, 2 * HUGE), 90)
    })();
    let st = child.release()?;
    res?;
    check!(
        matches!(st, WaitStatus::Exited(_, 0)),
        "the child's copy changed: {st:?}"
    );
    Ok(())
}
