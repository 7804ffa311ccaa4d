//! Eviction racing a process going away: making room under a cgroup's
//! `dmem.max` evicts another process's (or thread's) pages while that
//! process exits or unmaps them, inside the eviction's window (debugfs
//! `evict_delay_ms` holds the pages unmapped, before the migration
//! finalizes, for as long as the test needs). Linux 7.3's eviction by page
//! frame keeps no `anon_vma` alive: the exit frees it, and finalize walks
//! freed memory (KASAN: slab-use-after-free in `rmap_walk_anon`). msvm
//! evicts through the mm, with its mmap lock held: the exit or `munmap`
//! waits for the eviction instead.

use std::ffi::c_void;
use std::fs;
use std::path::Path;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use msvm_rt::{Device, Location, MigrateOutcome};
use nix::sys::mman::{mmap_anonymous, mprotect, munmap, MapFlags, ProtFlags};

use crate::cgroup::{leave, region, spawn_hold, wait, Cgroup};
use crate::check;
use crate::harness::{Outcome, Test};
use crate::svm::{fill, gpu0, verify, Map, PAGE};

pub fn tests() -> Vec<Test> {
    vec![
        Test {
            name: "race_eviction_and_exit_of_the_pages_owner",
            run: exit,
        },
        Test {
            name: "race_eviction_and_munmap_of_the_pages",
            run: unmap,
        },
    ]
}

const MIB: usize = 1 << 20;
const DELAY: &str = "/sys/kernel/debug/msvm/evict_delay_ms";
const EVICT: &str = "/sys/kernel/debug/msvm/evict";
/// How long each eviction step holds its pages unmapped.
pub(crate) const WINDOW_MS: u64 = 1500;

/// The fault injection of debugfs `evict_delay_ms`, off again on drop.
pub(crate) struct Window;

impl Window {
    pub(crate) fn open(ms: u64) -> Result<Self, String> {
        fs::write(DELAY, ms.to_string()).map_err(|e| format!("{DELAY}: {e}"))?;
        Ok(Self)
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        let _ = fs::write(DELAY, "0");
    }
}

/// How many eviction steps have waited in the window so far.
pub(crate) fn delays() -> Result<u64, String> {
    let text = fs::read_to_string(DELAY).map_err(|e| format!("{DELAY}: {e}"))?;
    text.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{DELAY}: {text:?}"))
}

/// Column `col` of device `index`'s row of debugfs `evict` (1: `by_mm`,
/// 2: `orphaned`, 3: `unrecorded`, 4: `renewed`), if the module has it.
pub(crate) fn evict_count(index: u32, col: usize) -> Result<Option<u64>, String> {
    let text = fs::read_to_string(EVICT).map_err(|e| format!("{EVICT}: {e}"))?;
    Ok(text.lines().find_map(|l| {
        let v: Vec<&str> = l.split_whitespace().collect();
        (v.first() == Some(&index.to_string().as_str()))
            .then(|| v.get(col)?.parse().ok())
            .flatten()
    }))
}

/// Pages of device `index` evicted through their mm and left orphans (by
/// a teardown) so far.
fn evicted(index: u32) -> Result<(u64, u64), String> {
    let col = |c| evict_count(index, c)?.ok_or_else(|| format!("{EVICT}: no gpu {index}"));
    Ok((col(1)?, col(2)?))
}

/// Waits until an eviction step is in the window (the count of steps that
/// waited passes `before`).
pub(crate) fn in_window(before: u64) -> Outcome {
    let t = Instant::now();
    while delays()? == before {
        if t.elapsed() > Duration::from_secs(60) {
            return Err("no eviction entered the window".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Moves `m` to `dev` in a thread, with the eviction window open, and runs
/// `act` once an eviction step is in the window (making room for `m`):
/// what the move did, and how long `act` took.
fn move_during(
    dev: &Device,
    m: &Map,
    act: impl FnOnce() -> Result<(), String>,
) -> Result<(MigrateOutcome, Duration), String> {
    let d0 = delays()?;
    let window = Window::open(WINDOW_MS)?;
    let (out, took) = std::thread::scope(|s| {
        let bytes = m.bytes();
        let mover = s.spawn(move || dev.migrate_slice(bytes, Location::Device));
        let took = in_window(d0).and_then(|()| {
            let t = Instant::now();
            act()?;
            Ok(t.elapsed())
        });
        (mover.join(), took)
    });
    drop(window);
    let out = out
        .map_err(|_| "the mover panicked".to_string())?
        .map_err(|e| e.to_string())?;
    Ok((out, took?))
}

/// Checks that room was made (`out`) through the mm of the pages evicted
/// (debugfs `evict` of device `index` against `before`): none left to the
/// orphanage (which only a device going away uses).
fn through_mm(index: u32, before: (u64, u64), out: &MigrateOutcome) -> Outcome {
    let (mm1, orphaned1) = evicted(index)?;
    let (mm0, orphaned0) = before;
    println!(
        "# evicted by mm +{}, orphaned +{}",
        mm1 - mm0,
        orphaned1 - orphaned0
    );
    check!(out.moved > 0, "no room made: {out:?}");
    check!(
        mm1 > mm0 && orphaned1 == orphaned0,
        "evicted by mm +{}, orphaned +{}",
        mm1 - mm0,
        orphaned1 - orphaned0
    );
    Ok(())
}

/// 1 MiB of 4 KiB pages in a mapping of its own (PROT_NONE guard pages on
/// either side, so that no neighbour shares its `anon_vma`: unmapping it
/// frees that `anon_vma`), filled with `seed` and moved to `dev`.
fn isolated(dev: &Device, seed: u64) -> Result<(usize, usize), String> {
    let len = MIB + 2 * PAGE;
    // SAFETY: a fresh anonymous mapping aliases nothing.
    let base = unsafe {
        mmap_anonymous(
            None,
            std::num::NonZeroUsize::new(len).ok_or("empty")?,
            ProtFlags::PROT_NONE,
            MapFlags::MAP_PRIVATE,
        )
    }
    .map_err(|e| format!("mmap: {e}"))?;
    let addr = base.as_ptr() as usize + PAGE;
    let ptr = NonNull::new(addr as *mut c_void).ok_or("null")?;
    // SAFETY: our own fresh mapping.
    unsafe { mprotect(ptr, MIB, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE) }
        .map_err(|e| format!("mprotect: {e}"))?;
    // SAFETY: the middle of our mapping, readable and writable now.
    let bytes = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, MIB) };
    // 4 KiB pages (the VMA is smaller than 2 MiB anyway).
    fill(bytes, seed);
    let out = dev
        .migrate_slice(bytes, Location::Device)
        .map_err(|e| e.to_string())?;
    check!(out.moved == (MIB / PAGE) as u64, "isolated 1 MiB: {out:?}");
    Ok((base.as_ptr() as usize, len))
}

/// A child holds 1 MiB on gpu0 in a cgroup limited to 1 MiB; the parent,
/// in the same cgroup, moves 1 MiB: room is made among the child's pages,
/// and the child is killed while they are unmapped for the move.
fn exit() -> Outcome {
    let dev = gpu0()?;
    let index = dev.index().map_err(|e| e.to_string())?;
    let r = region(&dev)?;
    let c = Cgroup::new("msvm-test-race-exit")?;
    c.set_max(&r, Some(MIB as u64))?;
    let (ready, go) = ("/tmp/race-ready", "/tmp/race-go");
    c.enter()?;
    let mut child = match spawn_hold(ready, go) {
        Ok(ch) => ch,
        Err(e) => {
            leave()?;
            return Err(e);
        }
    };
    let res = exit_race(&dev, index, &r, &c, ready, &mut child);
    // Whatever happened: no child left behind, and this process back in
    // the root cgroup for the tests after it.
    let _ = child.kill();
    let _ = child.wait();
    leave()?;
    res?;
    // The child's exit_mmap() may run a moment after the eviction let go
    // of its mm (on a workqueue): its charges go then.
    let _ = wait(10, "the child's charges to go", &mut || {
        Ok(c.current(&r)? == 0)
    });
    check!(
        c.current(&r)? == 0,
        "after the parent's fault-back and the child's exit: {}",
        c.current(&r)?
    );
    Ok(())
}

/// The part of [`exit`] that runs with the child.
fn exit_race(
    dev: &Device,
    index: u32,
    r: &str,
    c: &Cgroup,
    ready: &str,
    child: &mut std::process::Child,
) -> Outcome {
    wait(60, "the child's pages", &mut || {
        check!(
            child.try_wait().ok().flatten().is_none(),
            "the child ended before it parked its pages"
        );
        Ok(Path::new(ready).exists())
    })?;
    let held = c.current(r)?;
    let before = evicted(index)?;
    let mut m = Map::small(MIB)?;
    fill(m.bytes_mut(), 77);
    let (out, killed) = move_during(dev, &m, || {
        let _ = child.kill();
        let _ = child.wait();
        Ok(())
    })?;
    println!(
        "# race exit: child held {held} B; parent moved {out:?}; the kill took {killed:?} \
         (the eviction holds a user of the child's mm: its exit_mmap() waits for it)"
    );
    check!(held == MIB as u64, "the child's pages: dmem.current {held}");
    through_mm(index, before, &out)?;
    verify(m.bytes(), 77)
}

/// One process, two threads: 1 MiB of one mapping on gpu0 in a cgroup
/// limited to 1 MiB; moving another 1 MiB makes room among the first's
/// pages, and the other thread unmaps the first mapping while its pages
/// are unmapped for the move.
fn unmap() -> Outcome {
    let dev = gpu0()?;
    let index = dev.index().map_err(|e| e.to_string())?;
    let r = region(&dev)?;
    let c = Cgroup::new("msvm-test-race-unmap")?;
    c.set_max(&r, Some(MIB as u64))?;
    c.enter()?;
    let res = (|| {
        let (base, len) = isolated(&dev, 91)?;
        let before = evicted(index)?;
        let mut m = Map::small(MIB)?;
        fill(m.bytes_mut(), 92);
        let (out, waited) = move_during(&dev, &m, || {
            let ptr = NonNull::new(base as *mut c_void).ok_or("null")?;
            // SAFETY: our own mapping, no longer referred to.
            unsafe { munmap(ptr, len) }.map_err(|e| format!("munmap: {e}"))
        })?;
        println!("# race munmap: moved {out:?}; munmap took {waited:?}");
        through_mm(index, before, &out)?;
        // The munmap waited for the eviction: the mmap lock it needs was
        // held (by frame, it went through and freed the anon_vma).
        check!(
            waited >= Duration::from_millis(WINDOW_MS / 3),
            "the munmap did not wait for the eviction ({waited:?})"
        );
        verify(m.bytes(), 92)?;
        Ok(())
    })();
    leave()?;
    res?;
    check!(
        c.current(&r)? == 0,
        "after: dmem.current {}",
        c.current(&r)?
    );
    Ok(())
}
