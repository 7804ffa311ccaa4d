// SPDX-License-Identifier: GPL-2.0

//! msvm's debugfs directory, `/sys/kernel/debug/msvm/`:
//!
//! - `topology`: every device, the P2P distance matrix (as QUERY reports
//!   it), each pair's P2P path as `pci_p2pdma` decides it and why, and the
//!   owner groups.
//! - `shrink`: writing `idle` drops every device's read-only replicas and
//!   removes the pagemaps of its idle chunks, `all` also empties lightly used chunks into fuller ones and
//!   removes theirs, synchronously (what the shrinker's work does under
//!   memory pressure); reading gives the pagemaps the last write removed.
//! - `fail_large_system`: writing `N` makes the next `N` allocations of a
//!   2 MiB system folio for a device folio going to system RAM fail (fault
//!   injection: tests reach the 4 KiB fallbacks and eviction's retries);
//!   reading gives how many are left.
//! - `copy_floor`: writing `DEV MIB` times the driver's copy primitives
//!   over `MIB` MiB on device `DEV` (see `crate::vram::FloorPath`): system
//!   RAM to its VRAM, back, and a peer's VRAM (the first other device of
//!   its owner group) to its VRAM, in 4 KiB pages and in 2 MiB blocks, and
//!   system RAM to system RAM with `copy_highpage()` (`ram`, the copy of
//!   the reference driver `test_hmm`); reading gives
//!   `<path>_<4k|2m> <bytes> <ns>` lines (`-` for a path not run: no peer,
//!   no 2 MiB folios, no room). At most 1 GiB (twice that in system RAM
//!   for `ram`, taken without retrying: `-` if it is not there); it stops
//!   on a fatal signal or when either device goes away.
//! - `phases`: where each device's migration steps (by size class) and
//!   engine jobs spend their time: counts and microseconds per phase (the
//!   same figures as STATS).
//! - `cgroup`: each device's dmem cgroup counters (the same figures as
//!   STATS): the bytes of its memory charged to dmem cgroups now, and the
//!   pages migrations into it did not move because the process's cgroup
//!   was at its `dmem.max`.
//! - `evict`: per device, how eviction moved its pages: through the mm
//!   each is recorded in (`by_mm`), pages a device going away could not
//!   move through a record, copied to system RAM and left mapped as
//!   orphans (`orphaned`), and pages
//!   migrated in (or moved by a consolidation) with no record
//!   (`unrecorded`), and records written where a walk met a page that no
//!   record led to (`renewed`).
//! - `evict_delay_ms`: writing `MS` (at most 10000) makes every eviction
//!   step wait that long with its pages unmapped, before it finalizes,
//!   and a device's teardown as long before it copies its orphans (fault
//!   injection: tests make a process exit or `munmap` inside that
//!   window); reading gives the delay and how many steps waited.
//! - `hold_mmap`: writing `PID` holds that process's mmap lock for writing
//!   until `0` is written (at most 60 s); reading gives 1 while it is
//!   held (fault injection: a tenant whose lock making room may only
//!   try).
//! - `policy`: the placement policies' state of processes
//!   (`crate::process`): `blocks` recorded in all processes,
//!   `bytes_per_block` each takes, `untracked`: times a block could not be
//!   recorded (its process at `policy_blocks`, or out of memory).
//! - `copy_engine`: `use 1` if migrations copy with a device's copy
//!   engine where it has one (msvm-gpu), then per such device whether its
//!   engine is usable and its counters: submissions run to their fence,
//!   commands, bytes copied into VRAM (of which from a peer's VRAM over
//!   P2P: `bytes_p2p`), out of it, zeroed, and from VRAM to VRAM
//!   (`bytes_within`: consolidations), waits the
//!   interrupt woke, failed submissions (each reset, then copied by the
//!   CPU), and the commands the device says it completed since its last
//!   reset (`CE_DONE`); writing `0` makes migrations copy with the CPU, `1` with
//!   the engines again (the benchmark's baseline), `fail N` makes the next
//!   `N` runs start with a malformed command (fault injection: the engine
//!   halts, is reset, and the step is copied by the CPU).
//! - `job_engine`: `use 1` if jobs run on a device's job engine where it
//!   has one (msvm-gpu), then per such device whether its job engine and
//!   MMU are usable, jobs run to their fence, bytes written and read,
//!   waits the interrupt woke, failed jobs (`EIO`), the jobs the device
//!   says it completed, TLB invalidations waited for and their total
//!   nanoseconds, writes of a window's entries into the device's tables,
//!   windows that found no table page free (run by the CPU), and stale translations the device's checking
//!   mode found (`MMU_STALE`; module parameter `mmu_check`), the fault
//!   buffer's stalls, records, overflows, replays and cancels, the
//!   jobs the device's watchdog stopped (module parameter
//!   `job_watchdog_ms`), the microseconds the device says its job
//!   engine ran jobs (`JOB_BUSY`), the windows queued behind a window
//!   running (a warm job's pipeline, `crate::engine`) and the pipelines
//!   ended early for a waiter of their VM's lock or of the engine; the
//!   first line also says `pipeline 1` while warm windows are pipelined;
//!   writing `0` runs jobs on the CPU, `1` on the
//!   engines again, `hang N` queues each of the next `N` jobs behind one
//!   that never ends (fault injection: the watchdog stops it, the engine
//!   is reset, the job fails with `EIO` and the next one runs),
//!   `stall_delay MS` (at most 30000) makes each service of a stalled
//!   job wait that long first with the device parked, or until the
//!   ioctl must stop (fault injection: a test unplugs the device while a
//!   fault is pending), `pipeline 0` runs a warm job's windows one at a
//!   time (the benchmark's baseline) and `pipeline 1` pipelines them
//!   again.
//! - `dma_paths`: per device with the counters (msvm-gpu), the bytes its
//!   DMA moved since its reset as the device counts them: to memory it
//!   reaches directly (guest RAM), through the root complex (and the
//!   IOMMU), and to a peer inside its switch by bus address (`DMA_DIRECT`,
//!   `DMA_REMOTE`, `DMA_SWITCH`): which way P2P went.
//! - `locks`: msvm's global locks, a line each: name, acquisitions that
//!   could wait, and those that found the lock held (`topology`: the
//!   device registry's mutex; `processes`: the registry of processes'
//!   spinlock). The hot paths take no other global lock.

use kernel::{
    debugfs, fmt,
    num::casts::FromSafeCast,
    prelude::*,
    sync::atomic::{Acquire, Atomic, Relaxed, Release},
    uaccess::UserSliceReader,
};

use crate::reclaim::{shrink_all, CONSOLIDATE, IDLE};
use crate::sysmem::FAIL_LARGE_SYSTEM;

use crate::mm::cancel::Cancel;
use crate::mm::numa::{BULK_PAGES, SINGLE_PAGES};
use crate::mm::pagemap::PAGE_SIZE;
use crate::registry::{self, PoolRef};
use crate::topology::{LinkText, MAX_DEVICES};
use crate::vram::{
    FloorPath, VramPool, EVICT_DELAYS, EVICT_DELAY_MAX_MS, EVICT_DELAY_MS, FLOOR_MAX_PAGES,
};

mod engines;

/// The directory and its files; removed when dropped (module exit). A file
/// keeps its directory's entry alive, so the drop order does not matter.
#[pin_data]
pub(crate) struct Debugfs {
    dir: debugfs::Dir,
    #[pin]
    topology: debugfs::File<()>,
    #[pin]
    shrink: debugfs::File<Atomic<u64>>,
    #[pin]
    fail_large_system: debugfs::File<()>,
    #[pin]
    copy_floor: debugfs::File<Floor>,
    #[pin]
    phases: debugfs::File<()>,
    #[pin]
    cgroup: debugfs::File<()>,
    #[pin]
    evict: debugfs::File<()>,
    #[pin]
    evict_delay_ms: debugfs::File<()>,
    #[pin]
    hold_mmap: debugfs::File<Hold>,
    #[pin]
    policy: debugfs::File<()>,
    #[pin]
    locks: debugfs::File<()>,
    #[pin]
    numa: debugfs::File<()>,
    #[pin]
    copy_engine: debugfs::File<()>,
    #[pin]
    job_engine: debugfs::File<()>,
    #[pin]
    dma_paths: debugfs::File<()>,
}

/// The last `copy_floor` run: bytes per path, and nanoseconds per path and
/// size (0: not run).
struct Floor {
    /// A run is going on (one at a time: `EBUSY`).
    busy: Atomic<bool>,
    bytes: Atomic<u64>,
    ns: [Atomic<u64>; FLOOR_RUNS.len()],
}

/// `hold_mmap`'s state: [`HOLD_IDLE`], [`HOLD_TAKING`] (a writer waits
/// for the lock), [`HOLD_LOCKED`] or [`HOLD_RELEASE`] (let go asked).
struct Hold {
    state: Atomic<u32>,
}

const HOLD_IDLE: u32 = 0;
const HOLD_TAKING: u32 = 1;
const HOLD_LOCKED: u32 = 2;
const HOLD_RELEASE: u32 = 3;

/// The longest `hold_mmap` holds a lock, in milliseconds.
const HOLD_MAX_MS: u64 = 60_000;

/// The runs of `copy_floor`, in order: name, path, 2 MiB blocks.
const FLOOR_RUNS: [(&str, FloorPath, bool); 8] = [
    ("to_dev_4k", FloorPath::ToDevice, false),
    ("to_dev_2m", FloorPath::ToDevice, true),
    ("to_sys_4k", FloorPath::ToSystem, false),
    ("to_sys_2m", FloorPath::ToSystem, true),
    ("p2p_4k", FloorPath::FromPeer, false),
    ("p2p_2m", FloorPath::FromPeer, true),
    ("ram_4k", FloorPath::SystemCopy, false),
    ("ram_2m", FloorPath::SystemCopy, true),
];

impl Debugfs {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            dir: debugfs::Dir::new(c"msvm"),
            topology <- dir.read_callback_file(c"topology", (), &show_topology),
            shrink <- dir.read_write_callback_file(
                c"shrink",
                Atomic::new(0),
                &|n: &Atomic<u64>, f: &mut fmt::Formatter<'_>| writeln!(f, "{}", n.load(Relaxed)),
                &write_shrink,
            ),
            fail_large_system <- dir.read_write_callback_file(
                c"fail_large_system",
                (),
                &|(): &(), f: &mut fmt::Formatter<'_>| {
                    writeln!(f, "{}", FAIL_LARGE_SYSTEM.load(Relaxed))
                },
                &write_fail_large_system,
            ),
            copy_floor <- dir.read_write_callback_file(
                c"copy_floor",
                Floor {
                    busy: Atomic::new(false),
                    bytes: Atomic::new(0),
                    ns: [const { Atomic::new(0) }; FLOOR_RUNS.len()],
                },
                &show_floor,
                &write_floor,
            ),
            phases <- dir.read_callback_file(c"phases", (), &show_phases),
            cgroup <- dir.read_callback_file(c"cgroup", (), &show_cgroup),
            evict <- dir.read_callback_file(c"evict", (), &show_evict),
            evict_delay_ms <- dir.read_write_callback_file(
                c"evict_delay_ms",
                (),
                &|(): &(), f: &mut fmt::Formatter<'_>| {
                    let ms = EVICT_DELAY_MS.load(Relaxed);
                    writeln!(f, "{ms} {}", EVICT_DELAYS.load(Relaxed))
                },
                &write_evict_delay,
            ),
            hold_mmap <- dir.read_write_callback_file(
                c"hold_mmap",
                Hold {
                    state: Atomic::new(HOLD_IDLE),
                },
                &|h: &Hold, f: &mut fmt::Formatter<'_>| {
                    writeln!(f, "{}", u8::from(h.state.load(Relaxed) == HOLD_LOCKED))
                },
                &write_hold_mmap,
            ),
            policy <- dir.read_callback_file(c"policy", (), &show_policy),
            locks <- dir.read_callback_file(c"locks", (), &show_locks),
            numa <- dir.read_callback_file(c"numa", (), &show_numa),
            copy_engine <- dir.read_write_callback_file(
                c"copy_engine",
                (),
                &engines::show_copy_engine,
                &engines::write_copy_engine,
            ),
            job_engine <- dir.read_write_callback_file(
                c"job_engine",
                (),
                &engines::show_job_engine,
                &engines::write_job_engine,
            ),
            dma_paths <- dir.read_callback_file(c"dma_paths", (), &engines::show_dma_paths),
        })
    }
}

/// `shrink`: runs a shrink pass over every device (device page tables of
/// VMs not running a job, replicas, idle chunks; `all`: also consolidation).
fn write_shrink(removed: &Atomic<u64>, r: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 8];
    let n = r.len().min(buf.len());
    r.read_slice(&mut buf[..n])?;
    let level = match buf[..n].trim_ascii() {
        b"idle" => IDLE,
        b"all" => CONSOLIDATE,
        _ => return Err(EINVAL),
    };
    // Asked for, not for want of memory: side by side.
    removed.store(u64::from_safe_cast(shrink_all(level, true)), Relaxed);
    Ok(())
}

/// `fail_large_system`: sets the number of 2 MiB system folio allocations
/// to fail.
fn write_fail_large_system(_: &(), r: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 20];
    let n = r.len().min(buf.len());
    r.read_slice(&mut buf[..n])?;
    let text = core::str::from_utf8(buf[..n].trim_ascii()).map_err(|_| EINVAL)?;
    let count: u64 = text.parse().map_err(|_| EINVAL)?;
    FAIL_LARGE_SYSTEM.store(count, Relaxed);
    Ok(())
}

/// `evict_delay_ms`: sets the wait of each eviction step, in milliseconds
/// (`EINVAL` above [`EVICT_DELAY_MAX_MS`]).
fn write_evict_delay(_: &(), r: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 20];
    let n = r.len().min(buf.len());
    r.read_slice(&mut buf[..n])?;
    let text = core::str::from_utf8(buf[..n].trim_ascii()).map_err(|_| EINVAL)?;
    let ms: u64 = text.parse().map_err(|_| EINVAL)?;
    if ms > EVICT_DELAY_MAX_MS {
        return Err(EINVAL);
    }
    EVICT_DELAY_MS.store(ms, Relaxed);
    Ok(())
}

/// `hold_mmap`: writing `PID` takes that process's mmap lock for writing
/// and holds it, in the writing task, until `0` is written (or
/// [`HOLD_MAX_MS`], or the writer is killed): a test's other tenant,
/// whose mm making room may only try (`vram/room.rs`). One at a time
/// (`EBUSY`).
fn write_hold_mmap(h: &Hold, r: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 20];
    if r.len() > buf.len() {
        return Err(EINVAL);
    }
    let n = r.len();
    r.read_slice(&mut buf[..n])?;
    let text = core::str::from_utf8(buf[..n].trim_ascii()).map_err(|_| EINVAL)?;
    let pid: i32 = text.parse().map_err(|_| EINVAL)?;
    if pid <= 0 {
        // Asked of a hold being taken or held; nothing else.
        for from in [HOLD_TAKING, HOLD_LOCKED] {
            let _ = h.state.cmpxchg(from, HOLD_RELEASE, Relaxed);
        }
        return Ok(());
    }
    let mm = crate::mm::mmap::mm_of_pid(pid)?;
    if h.state.cmpxchg(HOLD_IDLE, HOLD_TAKING, Relaxed).is_err() {
        return Err(EBUSY);
    }
    let held = crate::mm::mmap::MmapWriteGuard::lock_killable(&mm).map(|guard| {
        // Held now (unless let go was asked meanwhile).
        let _ = h.state.cmpxchg(HOLD_TAKING, HOLD_LOCKED, Relaxed);
        let cancel = crate::mm::cancel::Cancel::task();
        let start = crate::mm::clock::now_ms();
        while h.state.load(Relaxed) == HOLD_LOCKED
            && crate::mm::clock::now_ms().saturating_sub(start) < HOLD_MAX_MS
            && cancel.check().is_ok()
        {
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(10));
        }
        drop(guard);
    });
    h.state.store(HOLD_IDLE, Relaxed);
    held
}

/// `topology`: one line per device, the matrix, the groups.
fn show_topology(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let topo = registry::devices();
    let present = |i: usize| topo.get(i).is_some();
    writeln!(f, "devices: {}", topo.len())?;
    for i in (0..MAX_DEVICES).filter(|&i| present(i)) {
        if let Some(n) = topo.get(i) {
            let (d, b) = (n.pci.domain, n.pci.bdf);
            writeln!(
                f,
                "gpu{i}: {d:04x}:{:02x}:{:02x}.{} {} MiB group {}",
                b >> 8,
                (b >> 3) & 0x1f,
                b & 7,
                n.vram_size >> 20,
                topo.group(i).unwrap_or(i)
            )?;
        }
    }
    writeln!(f, "p2p (row reads column's memory: distance, '-' none):")?;
    write!(f, "     ")?;
    for j in (0..MAX_DEVICES).filter(|&j| present(j)) {
        write!(f, " gpu{j:<2}")?;
    }
    writeln!(f)?;
    for i in (0..MAX_DEVICES).filter(|&i| present(i)) {
        write!(f, "gpu{i:<2}")?;
        for j in (0..MAX_DEVICES).filter(|&j| present(j)) {
            if i == j {
                write!(f, "     .")?;
                continue;
            }
            match topo
                .peers(i)
                .find(|p| p.index == j)
                .and_then(|p| p.link.distance)
            {
                Some(d) => write!(f, " {d:>5}")?,
                None => write!(f, "     -")?,
            }
        }
        writeln!(f)?;
    }
    writeln!(f, "p2p paths (pci_p2pdma's, row reads column's memory):")?;
    for i in (0..MAX_DEVICES).filter(|&i| present(i)) {
        for p in topo.peers(i) {
            writeln!(f, "gpu{i} -> gpu{}: {}", p.index, LinkText(&p.link))?;
        }
    }
    for l in topo.group_leaders() {
        let g = topo.group(l).unwrap_or(l);
        write!(f, "group {g}:")?;
        for i in (0..MAX_DEVICES).filter(|&i| topo.group(i) == Some(g)) {
            write!(f, " gpu{i}")?;
        }
        writeln!(f)?;
    }
    Ok(())
}

/// `copy_floor`: the last run.
fn show_floor(floor: &Floor, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let bytes = floor.bytes.load(Relaxed);
    for ((name, _, _), ns) in FLOOR_RUNS.iter().zip(floor.ns.iter()) {
        match ns.load(Relaxed) {
            0 => writeln!(f, "{name} - -")?,
            ns => writeln!(f, "{name} {bytes} {ns}")?,
        }
    }
    Ok(())
}

/// `copy_floor`: times every path over `MIB` MiB of device `DEV`.
fn write_floor(floor: &Floor, r: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 32];
    let n = r.len();
    if n > buf.len() {
        return Err(EINVAL);
    }
    r.read_slice(&mut buf[..n])?;
    let text = core::str::from_utf8(buf[..n].trim_ascii()).map_err(|_| EINVAL)?;
    let mut words = text.split_ascii_whitespace();
    let mut next = || -> Result<usize> { words.next().ok_or(EINVAL)?.parse().map_err(|_| EINVAL) };
    let (dev, mib) = (next()?, next()?);
    if next().is_ok() {
        return Err(EINVAL);
    }
    let npages = mib.checked_mul(1 << 20).ok_or(EINVAL)? / PAGE_SIZE;
    if mib == 0 || mib % 2 != 0 || npages > FLOOR_MAX_PAGES {
        return Err(EINVAL);
    }
    let (pool, peer) = {
        let topo = registry::devices();
        let pool = PoolRef::get_locked(&topo, dev)?;
        let peer = (0..MAX_DEVICES)
            .filter(|&j| j != dev && topo.same_group(dev, j))
            .find_map(|j| PoolRef::get_locked(&topo, j).ok());
        (pool, peer)
    };
    // Between 2 MiB blocks: a fatal signal, or either device going away
    // (its unbind waits for this run: it must not wait long).
    let cancel = Cancel::task();
    let stop = || -> Result {
        cancel.check()?;
        if pool.withdrawn() || peer.as_ref().is_some_and(|p| p.withdrawn()) {
            return Err(ENODEV);
        }
        Ok(())
    };
    if floor.busy.cmpxchg(false, true, Acquire).is_err() {
        return Err(EBUSY);
    }
    let r = run_floor(floor, &pool, peer.as_ref(), npages, mib, &stop);
    floor.busy.store(false, Release);
    r
}

/// The runs of one `copy_floor` write: a path that does not fit (`ENOSPC`)
/// or has no 2 MiB folios reads `-`; other errors end the write.
fn run_floor(
    floor: &Floor,
    pool: &PoolRef,
    peer: Option<&PoolRef>,
    npages: usize,
    mib: usize,
    stop: &dyn Fn() -> Result,
) -> Result {
    for ns in &floor.ns {
        ns.store(0, Relaxed);
    }
    floor.bytes.store(u64::from_safe_cast(mib << 20), Relaxed);
    for ((_, path, large), ns) in FLOOR_RUNS.iter().zip(floor.ns.iter()) {
        if *path == FloorPath::FromPeer && peer.is_none() {
            continue;
        }
        let t = match pool.copy_floor(*path, peer.map(|p| &**p), npages, *large, stop) {
            Err(e) if e == ENOSPC => None,
            // Twice the size in system RAM may not be there to spare.
            Err(e) if e == ENOMEM && *path == FloorPath::SystemCopy => None,
            r => r?,
        };
        ns.store(t.unwrap_or(0), Relaxed);
    }
    Ok(())
}
/// `phases`: per device, the phase split of its steps and jobs.
fn show_phases(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let pools: [Option<PoolRef>; MAX_DEVICES] = {
        let topo = registry::devices();
        core::array::from_fn(|i| PoolRef::get_locked(&topo, i).ok())
    };
    writeln!(f, "gpu size steps collect_us alloc_us copy_us install_us")?;
    for (i, pool) in pools.iter().enumerate() {
        let Some(pool) = pool else { continue };
        let p = pool.stats.phases.read();
        for (c, name) in ["4k", "64k", "2m"].iter().enumerate() {
            writeln!(
                f,
                "{i} {name} {} {} {} {} {}",
                p.steps[c], p.collect_us[c], p.alloc_us[c], p.copy_us[c], p.install_us[c]
            )?;
        }
    }
    writeln!(f, "gpu jobs place_us walk_us bind_us exec_us")?;
    for (i, pool) in pools.iter().enumerate() {
        let Some(pool) = pool else { continue };
        let p = pool.stats.phases.read();
        writeln!(
            f,
            "{i} {} {} {} {} {}",
            p.jobs, p.place_us, p.walk_us, p.bind_us, p.exec_us
        )?;
    }
    Ok(())
}

/// Writes `header`, then a `row` for each device, with its pool.
pub(crate) fn per_device(
    f: &mut fmt::Formatter<'_>,
    header: &str,
    row: impl Fn(&mut fmt::Formatter<'_>, usize, &VramPool) -> fmt::Result,
) -> fmt::Result {
    let pools: [Option<PoolRef>; MAX_DEVICES] = {
        let topo = registry::devices();
        core::array::from_fn(|i| PoolRef::get_locked(&topo, i).ok())
    };
    writeln!(f, "{header}")?;
    for (i, pool) in pools.iter().enumerate() {
        if let Some(pool) = pool {
            row(f, i, pool)?;
        }
    }
    Ok(())
}

/// `policy`: the placement policies' state of processes.
fn show_policy(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let (blocks, untracked) = crate::process::figures();
    writeln!(f, "blocks {blocks}")?;
    writeln!(f, "bytes_per_block {}", crate::process::bytes_per_block())?;
    writeln!(f, "untracked {untracked}")
}

/// `locks`: the global locks' contention.
fn show_locks(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let (a, c) = crate::registry::contention();
    writeln!(f, "topology {a} {c}")?;
    let (a, c) = crate::process::contention();
    writeln!(f, "processes {a} {c}")
}

/// `numa`: small pages coming home taken in bulk and one at a time (see
/// `crate::mm::numa`), and each device's node (`-`: none).
fn show_numa(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "bulk_pages {}", BULK_PAGES.load(Relaxed))?;
    writeln!(f, "single_pages {}", SINGLE_PAGES.load(Relaxed))?;
    per_device(f, "gpu node", |f, i, p| match p.home().node() {
        Some(n) => writeln!(f, "{i} {n}"),
        None => writeln!(f, "{i} -"),
    })
}

/// `evict`: per device, how eviction moved its pages.
fn show_evict(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    per_device(f, "gpu by_mm orphaned unrecorded renewed", |f, i, p| {
        let s = &p.stats;
        let (m, fr, u, r) = (
            s.by_mm.load(Relaxed),
            s.orphaned.load(Relaxed),
            s.unrecorded.load(Relaxed),
            s.renewed.load(Relaxed),
        );
        writeln!(f, "{i} {m} {fr} {u} {r}")
    })
}

/// `cgroup`: per device, its dmem cgroup counters.
fn show_cgroup(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    per_device(f, "gpu cgroup_bytes cgroup_limited", |f, i, p| {
        let s = &p.stats;
        writeln!(f, "{i} {} {}", s.cg_bytes(), s.cg_limited.load(Relaxed))
    })
}
