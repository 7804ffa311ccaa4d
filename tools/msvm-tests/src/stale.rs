//! Pages whose record no longer leads to them (issue 44, item 2): eviction
//! moves a device page through the mm and address it was migrated in at
//! (`Documentation/design.rst`, "Known problems"). A page `mremap` moved,
//! or that only a fork child maps once its parent exited, was skipped by
//! making room for good: its process held VRAM outside the eviction
//! policy, and another tenant could not have it. msvm now renews a page's
//! record wherever it meets the page under a walk's valid sequence (here,
//! a job in place and the process's RESIDENCY), and the other tenant's
//! room comes through it. A fork child that meets pages its parent still
//! maps, then exits, leaves their records the parent's.
//! (The third way, a chunk whose table of 4,095 mms was full, is gone: a
//! table now takes as many mms as its chunk has pages; KUnit
//! `msvm_records` records a page each of 4,100 mms.)

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use msvm_rt::{Device, Exec, Location};
use nix::sys::mman::{mremap, MRemapFlags};
use nix::sys::prctl::set_child_subreaper;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, getppid, read, write, ForkResult, Pid};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm::{fill, gpu0, verify, Map};

pub fn tests() -> Vec<Test> {
    vec![Test {
        name: "stale_records_renewed_then_evicted_for_another_tenant",
        run: renewed,
    }]
}

/// The bytes each way leaves on the device (4 KiB pages).
const LEN: usize = 64 << 10;
/// What the first tenant moves to gpu0 after those (small pages): with
/// them, 8 blocks of 2 MiB.
const PADDING: usize = (16 << 20) - 2 * LEN;
const BLOCK: usize = 2 << 20;
const FORKED: u64 = 0x5ea1;
const MOVED: u64 = 0x5ea2;
const FILLER: u64 = 0x5ea3;
const PADDED: u64 = 0x5ea4;

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// Records of device `index` renewed so far (debugfs `evict`), if the
/// module counts them (a module from before it renewed any does not).
fn renewed_count(index: u32) -> Result<Option<u64>, String> {
    crate::race::evict_count(index, 4)
}

/// A process whose parent moved `LEN` bytes to gpu0 and exited after
/// forking it (the pages' record names the parent's dead mm), and which
/// moved `LEN` bytes of its own there and `mremap`ped them (their record
/// names an address nothing maps); its RESIDENCY meets both. Then another
/// tenant fills gpu0: both must be evicted, intact.
fn renewed() -> Outcome {
    let before = renewed_count(0)?;
    set_child_subreaper(true).map_err(e)?;
    let res = std::panic::catch_unwind(tenants).unwrap_or_else(|_| Err("panicked".into()));
    let _ = set_child_subreaper(false);
    let after = renewed_count(0)?;
    let renewed = after.zip(before).map(|(a, b)| a - b);
    println!("# records renewed on gpu0: {renewed:?}");
    res?;
    let want = 2 * (LEN / crate::svm::PAGE) as u64;
    check!(
        renewed.is_some_and(|n| n >= want),
        "{renewed:?} records renewed, want {want}"
    );
    Ok(())
}

fn tenants() -> Outcome {
    let (ready_r, ready_w) = nix::unistd::pipe().map_err(e)?;
    let (go_r, go_w) = nix::unistd::pipe().map_err(e)?;
    let (res_r, res_w) = nix::unistd::pipe().map_err(e)?;
    // SAFETY: the child runs only its own code and ends with `_exit`.
    let parent = match unsafe { fork() }.map_err(e)? {
        ForkResult::Child => {
            drop((ready_r, go_w, res_r));
            // A panic ends this process too, never the harness's copy.
            let run = std::panic::AssertUnwindSafe(|| holder(ready_w, &go_r));
            let msg = match std::panic::catch_unwind(run) {
                Ok(Ok(())) => "ok".to_string(),
                Ok(Err(m)) => m,
                Err(_) => "the first tenant panicked".to_string(),
            };
            let _ = write(&res_w, msg.as_bytes());
            // SAFETY: ends this process (the parent's or the child's copy).
            unsafe { nix::libc::_exit(0) };
        }
        ForkResult::Parent { child } => child,
    };
    drop((ready_w, go_r, res_w));
    // The parent exits once it forked; its child carries on.
    match waitpid(parent, None).map_err(e)? {
        WaitStatus::Exited(_, 0) => {}
        st => return Err(format!("the first tenant's parent: {st:?}")),
    }
    let mut b = [0u8; 1];
    let ready = read(&ready_r, &mut b).map_err(e)? == 1;
    let filled = if ready { fill_gpu0() } else { Ok(()) };
    let _ = write(&go_w, b"g");
    drop(go_w);
    let msg = read_all(&res_r)?;
    reap_orphans(Duration::from_secs(30))?;
    filled?;
    check!(msg == "ok", "first tenant: {msg}");
    Ok(())
}

/// The first tenant: the forked process of [`tenants`], in the parent's
/// copy and then in the child's. Returns in the child only.
fn holder(ready: OwnedFd, go: &OwnedFd) -> Outcome {
    let mut forked = Map::small(LEN)?;
    fill(forked.bytes_mut(), FORKED);
    {
        let dev = gpu0()?;
        let out = dev
            .migrate_slice(forked.bytes(), Location::Device)
            .map_err(e)?;
        check!(out.moved as usize * crate::svm::PAGE == LEN, "{out:?}");
    }
    let me = nix::unistd::getpid();
    // SAFETY: the child runs only this function's code and ends with
    // `_exit` (in `tenants`).
    if let ForkResult::Parent { .. } = unsafe { fork() }.map_err(e)? {
        // The pages stay shared with the child only.
        // SAFETY: ends the parent, which holds nothing else to flush.
        unsafe { nix::libc::_exit(0) };
    }
    let t = Instant::now();
    while getppid() == me {
        check!(t.elapsed() < Duration::from_secs(30), "the parent stays");
        std::thread::sleep(Duration::from_millis(5));
    }
    let dev = gpu0()?;
    let mut moved = Map::small(LEN)?;
    fill(moved.bytes_mut(), MOVED);
    let out = dev
        .migrate_slice(moved.bytes(), Location::Device)
        .map_err(e)?;
    check!(out.moved as usize * crate::svm::PAGE == LEN, "{out:?}");
    // Its own pages fill the blocks these pages are in (small pages fill
    // partly used blocks first): the other tenant's request then has no
    // page in them, and may evict them (a request never evicts blocks it
    // used itself).
    let mut padding = Map::small(PADDING)?;
    fill(padding.bytes_mut(), PADDED);
    dev.migrate_slice(padding.bytes(), Location::Device)
        .map_err(e)?;
    // A fork child meets those while this process still maps them, and
    // exits: their records must stay this process's (a record moved to the
    // child would lead nowhere once it is gone).
    child_meets(&padding)?;
    // Moved to a fresh range: `over` owns it now; `moved` is gone.
    let over = Map::small(LEN)?;
    // SAFETY: both ranges are ours; `moved` is forgotten, as its pages
    // move to `over`'s range, whose old pages `mremap` replaces.
    unsafe {
        mremap(
            std::ptr::NonNull::new(moved.addr() as *mut _).ok_or("null")?,
            LEN,
            LEN,
            MRemapFlags::MREMAP_MAYMOVE | MRemapFlags::MREMAP_FIXED,
            Some(std::ptr::NonNull::new(over.addr() as *mut _).ok_or("null")?),
        )
    }
    .map_err(|x| format!("mremap: {x}"))?;
    std::mem::forget(moved);
    // A job in place meets the moved pages (its walk, or the fault
    // handler's), RESIDENCY the forked ones, each under a valid sequence:
    // their records lead here now.
    let r0 = renewed_count(0)?;
    let mut want = vec![0u8; LEN];
    fill(&mut want, MOVED);
    let job = dev
        .exec(Exec::Checksum, over.addr(), LEN, true)
        .map_err(e)?;
    check!(
        job.result == msvm_rt::checksum(&want),
        "mremapped: the job read other bytes"
    );
    if let (Some(a), Some(b)) = (r0, renewed_count(0)?) {
        check!(
            b - a >= (LEN / crate::svm::PAGE) as u64,
            "a job met the mremapped pages: {} records renewed",
            b - a
        );
    }
    for (what, m) in [("forked", &forked), ("mremapped", &over)] {
        let r = dev.residency(m.addr(), LEN).map_err(e)?;
        check!(
            r.devices[0] == LEN as u64,
            "{what}: {} of {LEN} bytes on gpu0 before",
            r.devices[0]
        );
    }
    write(&ready, b"r").map_err(e)?;
    drop(ready);
    let mut b = [0u8; 1];
    read(go, &mut b).map_err(e)?;
    // The padding's last block may hold the other tenant's pages too (if
    // gpu0 had a partly used block before): that request then keeps it.
    let checked = [
        ("forked", &forked, FORKED, 0),
        ("mremapped", &over, MOVED, 0),
        ("met by a child that exited", &padding, PADDED, BLOCK - 1),
    ];
    for (what, m, seed, may_stay) in checked {
        let r = dev.residency(m.addr(), m.len()).map_err(e)?;
        check!(
            r.devices[0] <= may_stay as u64 && r.devices[0] + r.system == m.len() as u64,
            "{what}: {} bytes stayed on gpu0 ({} in system RAM) while another tenant filled it",
            r.devices[0],
            r.system
        );
        verify(m.bytes(), seed).map_err(|x| format!("{what}: {x}"))?;
    }
    Ok(())
}

/// Forks a child that meets `m`'s pages (shared with it) through its own
/// VM's RESIDENCY and exits.
fn child_meets(m: &Map) -> Outcome {
    // SAFETY: the child runs only this closure and ends with `_exit`.
    match unsafe { fork() }.map_err(e)? {
        ForkResult::Child => {
            let run = std::panic::AssertUnwindSafe(|| {
                let dev = gpu0()?;
                let r = dev.residency(m.addr(), m.len()).map_err(e)?;
                check!(r.devices[0] > 0, "the child found nothing on gpu0");
                Ok::<(), String>(())
            });
            let ok = matches!(std::panic::catch_unwind(run), Ok(Ok(())));
            // SAFETY: ends the child.
            unsafe { nix::libc::_exit(i32::from(!ok)) };
        }
        ForkResult::Parent { child } => match waitpid(child, None).map_err(e)? {
            WaitStatus::Exited(_, 0) => Ok(()),
            st => Err(format!("the child that meets the pages: {st:?}")),
        },
    }
}

/// The second tenant: moves as much as gpu0 holds there, and checks it.
fn fill_gpu0() -> Outcome {
    let dev: Device = gpu0()?;
    let size = dev.query().map_err(e)?.vram_size as usize;
    let mut m = Map::new(size)?;
    fill(m.bytes_mut(), FILLER);
    let out = dev.migrate_slice(m.bytes(), Location::Device).map_err(e)?;
    println!("# the second tenant's {} MiB to gpu0: {out:?}", size >> 20);
    check!(out.moved > 0, "no room for the second tenant: {out:?}");
    verify(m.bytes(), FILLER).map_err(|x| format!("second tenant: {x}"))
}

/// What the pipe carries until its writers close it.
pub(crate) fn read_all(fd: &OwnedFd) -> Result<String, String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        match read(fd, &mut buf).map_err(e)? {
            0 => break,
            n => out.extend_from_slice(&buf[..n]),
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Waits for the orphaned first tenant (this process is its subreaper).
fn reap_orphans(limit: Duration) -> Outcome {
    let t = Instant::now();
    loop {
        match waitpid(
            Pid::from_raw(-1),
            Some(nix::sys::wait::WaitPidFlag::WNOHANG),
        ) {
            Ok(WaitStatus::StillAlive) => {
                check!(t.elapsed() < limit, "the first tenant did not end");
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(_) => {}
            Err(nix::errno::Errno::ECHILD) => return Ok(()),
            Err(x) => return Err(e(x)),
        }
    }
}
