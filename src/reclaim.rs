// SPDX-License-Identifier: GPL-2.0

//! Giving memory back: msvm's shrinker and the work it schedules.
//!
//! Struct pages of device memory cost RAM (64 bytes per 4 KiB page: 1 MiB
//! per 64 MiB chunk). The shrinker counts, in struct pages, what the
//! devices could give back: idle chunks (cached pagemaps with no page in
//! use) first, then chunks a consolidation would empty into fuller ones
//! (`VramPool::reclaimable`). A scan allocates nothing and only tries
//! locks: it queues the preallocated work on a `WQ_MEM_RECLAIM` workqueue;
//! when the reclaimer may block, one scan at a time waits a little for the
//! work's progress (see `Reclaimer::scan`). The work removes idle chunks'
//! pagemaps; when there were none, it empties the lightest, coldest chunks
//! into fuller ones (pages that do not fit stay) and removes those
//! pagemaps.
//!
//! Device page tables count too (`crate::mm::devpt`): a pass empties the
//! tables of the VMs not running a job (they refault). So does the
//! placement policies' state of processes (`crate::process`), beyond its
//! first 4 MiB: a pass frees that of cold blocks (no policy looked at them
//! for a thrashing epoch; none pinned), whose histories and counts the
//! policies build again.
//!
//! The same passes run synchronously from debugfs (`shrink`), for tests.
//!
//! # Lock order
//!
//! Nothing here holds a lock across a call; [`WANT`] is an atomic, and the
//! work item is preallocated (a scan allocates nothing). The work takes a `PoolRef` per device (the topology lock only
//! briefly), then the pool's own locks (`src/vram/mod.rs`).

use kernel::{
    num::casts::FromSafeCast,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Full, Relaxed, Release},
        Arc,
    },
    workqueue::{impl_has_work, new_work, Work, WorkItem},
};

use crate::mm::reclaim::{ReclaimQueue, ShrinkerOps};
use crate::registry;

/// How hard the next work run shrinks: [`TABLES`], [`IDLE`] or
/// [`CONSOLIDATE`].
static WANT: Atomic<u64> = Atomic::new(0);
/// Bytes the shrink passes freed so far (all devices): struct pages, and
/// device page tables.
static FREED: Atomic<u64> = Atomic::new(0);

/// A shrink pass removed a pagemap whose struct pages took `bytes`.
fn note_freed(bytes: usize) {
    FREED.add(u64::from_safe_cast(bytes), Relaxed);
}

/// The task running the shrink work, while it runs (0 otherwise).
static WORKER: Atomic<usize> = Atomic::new(0);
/// Whether a reclaimer is waiting for the work (one at a time).
static WAITING: Atomic<u32> = Atomic::new(0);

/// How long a scan that may sleep waits for the work to show progress.
const SCAN_WAIT_MS: u32 = 100;

/// Empty the device page tables of the VMs not running a job (every level
/// does).
pub(crate) const TABLES: u64 = 1;
/// Also drop replicas and remove idle chunks' pagemaps.
pub(crate) const IDLE: u64 = 2;
/// Also empty lightly used chunks into fuller ones.
pub(crate) const CONSOLIDATE: u64 = 3;

/// The shrinker's objects are struct pages: a count is that many times
/// `struct_page_size()` bytes. (So fine a unit makes reclaim call the
/// shrinker from its first, gentlest passes, early enough for the work to
/// run before the kernel runs out of other things to reclaim.)
fn units(bytes: usize) -> usize {
    bytes
        .checked_div(crate::mm::reclaim::struct_page_size())
        .unwrap_or(0)
}

/// The shrinker's owner: the workqueue its scans feed, and the one work
/// item they queue (queuing it again while it is pending does nothing).
pub(crate) struct Reclaimer {
    /// Destroyed (drained) first: the work item outlives every run.
    queue: ReclaimQueue,
    work: Arc<ShrinkWork>,
}

impl Reclaimer {
    pub(crate) fn new() -> Result<Self> {
        Ok(Self {
            queue: ReclaimQueue::new(c"msvm-reclaim")?,
            work: Arc::pin_init(
                pin_init!(ShrinkWork {
                    work <- new_work!("msvm::reclaim"),
                }),
                GFP_KERNEL,
            )?,
        })
    }
}

/// The work the shrinker schedules: one shrink pass at the [`WANT`]ed
/// level.
#[pin_data]
struct ShrinkWork {
    #[pin]
    work: Work<ShrinkWork>,
}

impl_has_work! {
    impl HasWork<Self> for ShrinkWork { self.work }
}

impl WorkItem for ShrinkWork {
    type Pointer = Arc<ShrinkWork>;

    fn run(_this: Arc<ShrinkWork>) {
        WORKER.store(kernel::task::Task::current_raw().addr(), Release);
        let level = WANT.xchg(0, Full);
        if level != 0 {
            // Memory is short: no new threads for it.
            shrink_all(level, false);
        }
        WORKER.store(0, Release);
    }
}

/// What the shrinker could free on every device, in bytes: idle chunks,
/// chunks a consolidation would empty, device page tables (those of VMs
/// running a job stay) and the placement policies' state of processes
/// (pinned blocks stay). `None` if a lock was busy.
fn reclaimable() -> Option<(usize, usize, usize)> {
    let mut total = (0, 0, crate::process::reclaimable());
    for p in registry::pools(false)?.iter().flatten() {
        let (idle, light) = p.reclaimable()?;
        total.0 += idle;
        total.1 += light;
        // CAST: a byte count of tables in memory fits a `usize`.
        total.2 += p.pt_tables().counters.bytes.load(Relaxed) as usize;
    }
    Some(total)
}

/// Whether the policies' state of a block may go under memory pressure:
/// no policy looked at it for a thrashing epoch (`thrash_epoch_ms`, at
/// least 10 s: a history that old is forgotten anyway) and it holds no pin.
fn policy_cold(b: &crate::process::Block) -> bool {
    let epoch_s = crate::module_parameters::thrash_epoch_ms
        .value()
        .div_ceil(1000);
    b.idle_s() >= epoch_s.max(10) && !crate::thrash::holds_pin(b)
}

/// One shrink pass over every device at `level` ([`TABLES`], [`IDLE`] or
/// [`CONSOLIDATE`]), idle chunks removed side by side if `side_by_side`
/// (see `VramPool::trim_idle`): returns the pagemaps removed.
pub(crate) fn shrink_all(level: u64, side_by_side: bool) -> usize {
    let mut removed = 0;
    // The policies' state of cold blocks: histories and counts the
    // policies would mostly have forgotten, and build again.
    note_freed(crate::process::shrink_all(|b| !policy_cold(b)));
    let Some(pools) = registry::pools(true) else {
        return 0;
    };
    for p in pools.iter().flatten() {
        // Device page tables first: they refault.
        note_freed(p.pt_tables().shrink());
        if level < IDLE {
            continue;
        }
        // Replicas then: copies, dropped without moving a page.
        p.drop_replicas();
        let n = p.trim_idle(note_freed, side_by_side);
        removed += n;
        if level >= CONSOLIDATE && n == 0 {
            match p.consolidate(note_freed) {
                Ok(k) => removed += k,
                Err(e) => pr_warn!("msvm: gpu{}: consolidation failed: {e:?}\n", p.index()),
            }
        }
    }
    removed
}

impl ShrinkerOps for Reclaimer {
    fn count(&self) -> Option<usize> {
        // A busy lock means "nothing now", not "nothing at all". The
        // tables of VMs running a job count too: a pass frees them once
        // the job is done.
        let Some((idle, light, tables)) = reclaimable() else {
            return Some(0);
        };
        (idle + light + tables > 0).then(|| units(idle + light + tables))
    }

    fn scan(&self, may_sleep: bool) -> Option<usize> {
        let (idle, light, tables) = reclaimable()?;
        // The chunks decide the level; tables alone ask for a pass that
        // empties them, which nobody waits for (those of VMs running a job
        // stay, so it may free nothing).
        let (level, freed) = if idle > 0 {
            (IDLE, idle)
        } else if light > 0 {
            (CONSOLIDATE, light)
        } else if tables > 0 {
            (TABLES, 0)
        } else {
            return Some(0);
        };
        // Raise the wanted level (never lower it); queue the run unless it
        // is pending (then the pending run sees the new level).
        let mut cur = WANT.load(Relaxed);
        while cur < level {
            match WANT.cmpxchg(cur, level, Full) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        let before = FREED.load(Acquire);
        let _ = self.queue.queue().enqueue(self.work.clone());
        let me = kernel::task::Task::current_raw().addr();
        // Never wait for the work from the work itself (its allocations may
        // enter reclaim), and let one reclaimer wait at a time: the others
        // take the estimate.
        if level == TABLES
            || !may_sleep
            || WORKER.load(Acquire) == me
            || WAITING.cmpxchg(0, 1, Full).is_err()
        {
            return Some(units(freed));
        }
        let freed_now = wait_for_work(before);
        WAITING.store(0, Release);
        Some(freed_now)
    }
}

/// Waits up to [`SCAN_WAIT_MS`] for the shrink work to free something after
/// `before`; returns what it freed, in struct pages.
fn wait_for_work(before: u64) -> usize {
    // A reclaimer that may block waits a little for the work to free
    // something, so that its progress is seen before the kernel decides it
    // is out of memory. Bounded: the work may itself be waiting for memory.
    for _ in 0..SCAN_WAIT_MS / 2 {
        kernel::time::delay::fsleep(kernel::time::Delta::from_millis(2));
        let now = FREED.load(Acquire);
        if now != before {
            // CAST: `u64` fits in `usize` on 64-bit kernels.
            return units(now.wrapping_sub(before) as usize);
        }
    }
    0
}
