//! Making room passes over a tenant whose mm is busy (issue 44, item 3):
//! a migration into a full device evicts other tenants' blocks through
//! their mms, and only *tries* another tenant's mmap lock
//! (`src/vram/room.rs`), so that a process holding its own lock (a long
//! `mmap`, `munmap` or `fork`) delays nobody else. debugfs `hold_mmap`
//! holds a process's mmap lock for writing for as long as the test needs.

use std::fs;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use msvm_rt::{Device, Location};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, read, write, ForkResult, Pid};

use crate::check;
use crate::harness::{Outcome, Test};
use crate::stale::read_all;
use crate::svm::{fill, verify, Map, PAGE};
use crate::sysfs;

pub fn tests() -> Vec<Test> {
    vec![Test {
        name: "room_passes_over_a_tenant_whose_mmap_lock_is_held",
        run: passes_over,
    }]
}

const HOLD: &str = "/sys/kernel/debug/msvm/hold_mmap";
/// The other tenant's pages on the device.
const LEN: usize = 2 << 20;
const SEED: u64 = 0xb05e;

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// Whether `hold_mmap` holds a lock now.
fn holding() -> Result<bool, String> {
    let t = fs::read_to_string(HOLD).map_err(|x| format!("{HOLD}: {x}"))?;
    Ok(t.trim() == "1")
}

/// Another tenant keeps 2 MiB of 4 KiB pages on the first GPU while
/// debugfs `hold_mmap` holds its mmap lock for writing; this process then
/// migrates as much as the GPU holds. The migration must return while the
/// other tenant's lock is still held (making room may only try it: waiting,
/// it would return only once the hold ends, up to 60 s later), and every
/// page of the other tenant must still be on the GPU, intact.
fn passes_over() -> Outcome {
    let gpu = sysfs::msvm_gpus()?.into_iter().next().ok_or("no GPU")?;
    let dev = Device::open(&gpu.node).map_err(e)?;
    dev.vm_create().map_err(e)?;
    let q = dev.query().map_err(e)?;
    let (index, vram) = (q.index as usize, q.vram_size as usize);
    let (ready_r, ready_w) = nix::unistd::pipe().map_err(e)?;
    let (go_r, go_w) = nix::unistd::pipe().map_err(e)?;
    let (res_r, res_w) = nix::unistd::pipe().map_err(e)?;
    // SAFETY: the child runs only `tenant` and ends with `_exit`.
    let child = match unsafe { fork() }.map_err(e)? {
        ForkResult::Child => {
            drop((ready_r, go_w, res_r));
            let res = tenant(&gpu.node, index, &ready_w, &go_r);
            let msg = match &res {
                Ok(()) => "ok".to_string(),
                Err(x) => x.clone(),
            };
            let _ = write(&res_w, msg.as_bytes());
            // SAFETY: leaving the child.
            unsafe { nix::libc::_exit(i32::from(res.is_err())) }
        }
        ForkResult::Parent { child } => child,
    };
    drop((ready_w, go_r, res_w));
    let run = against(child, &dev, vram, &ready_r);
    // The tenant checks its pages and leaves whatever happened.
    let _ = fs::write(HOLD, "0");
    let _ = write(&go_w, b"g");
    let msg = read_all(&res_r)?;
    let st = waitpid(child, None).map_err(e)?;
    run?;
    check!(msg == "ok", "the other tenant: {msg}");
    check!(
        matches!(st, WaitStatus::Exited(_, 0)),
        "the other tenant: {st:?}"
    );
    Ok(())
}

/// This process's part: holds the tenant's lock, migrates `vram` bytes to
/// `dev`, checks the migration returned while the lock was held.
fn against(child: Pid, dev: &Device, vram: usize, ready: &OwnedFd) -> Outcome {
    let mut b = [0u8; 1];
    check!(
        read(ready, &mut b).map_err(e)? == 1,
        "the other tenant did not place its pages"
    );
    let pid = child.as_raw().to_string();
    // Blocks while it holds the lock.
    let holder = std::thread::spawn(move || fs::write(HOLD, pid));
    let t = Instant::now();
    while !holding()? {
        if holder.is_finished() {
            let r = holder.join().map_err(|_| "the holder panicked")?;
            return Err(format!("{HOLD}: {r:?}"));
        }
        check!(
            t.elapsed() < Duration::from_secs(30),
            "{HOLD}: the lock was not taken"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let big = Map::new(vram)?;
    let t = Instant::now();
    let out = dev.migrate(big.addr(), vram, Location::Device);
    let took = t.elapsed();
    let still = holding()?;
    let _ = fs::write(HOLD, "0");
    let held = holder.join().map_err(|_| "the holder panicked")?;
    println!(
        "# the migration of {} MiB took {took:?}, the other tenant's lock held: {still}; {out:?}",
        vram >> 20
    );
    let out = out.map_err(e)?;
    held.map_err(|x| format!("{HOLD}: {x}"))?;
    check!(
        still,
        "the migration returned after the other tenant's mmap lock was let go ({took:?}): making room waited for it"
    );
    check!(out.moved > 0, "nothing moved: {out:?}");
    Ok(())
}

/// The other tenant: 2 MiB of 4 KiB pages on the GPU at `node` (device
/// `index`), then, once told, they must all still be there, intact.
fn tenant(node: &std::path::Path, index: usize, ready: &OwnedFd, go: &OwnedFd) -> Outcome {
    let mut m = Map::small(LEN)?;
    fill(m.bytes_mut(), SEED);
    let dev = Device::open(node).map_err(e)?;
    dev.vm_create().map_err(e)?;
    let out = dev.migrate(m.addr(), LEN, Location::Device).map_err(e)?;
    check!(out.moved == (LEN / PAGE) as u64, "placed {out:?}");
    write(ready, b"r").map_err(e)?;
    let mut b = [0u8; 1];
    let _ = read(go, &mut b);
    let r = dev.residency(m.addr(), LEN).map_err(e)?;
    check!(
        r.devices[index] == LEN as u64,
        "{} of {LEN} bytes still on the GPU: evicted while the mmap lock was held",
        r.devices[index]
    );
    verify(m.bytes(), SEED)
}
