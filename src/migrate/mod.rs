// SPDX-License-Identifier: GPL-2.0

//! The migration planner: moves a range of a process's address space to a
//! device's memory or back to system RAM, one 2 MiB block
//! ([`BLOCK_PAGES`]) at a time, with one allocation of device memory and one
//! copy pass per step; and moves a page back to system RAM when the CPU
//! touches it (`migrate_to_ram`).
//!
//! Fault-back window: the 64 KiB around the faulting address (aligned, within
//! its VMA), 16 pages per fault: a CPU walking device data sequentially takes
//! one fault per window instead of one per page, and a stray access moves at
//! most 64 KiB. The explicit MIGRATE remains the fast path.
//!
//! A request works in steps of at most one 2 MiB block: each step takes the
//! mmap read lock and lets it go, so the process's mmap writers (and
//! `/proc` readers) wait one step at most; between steps a fatal signal or
//! the device going away stops the request ([`Cancel`]).
//!
//! A step towards a device may run twice: the pool grows (creates a chunk)
//! only between two tries, with no mmap lock held (see [`device_step`]).
//!
//! # Lock order
//!
//! Each step holds the mmap read lock (the write lock for a whole 2 MiB
//! block); the pool's chunk table and free maps nest inside, its growth
//! never does (see `src/vram/mod.rs`).

use kernel::{
    mm::{
        virt::{flags, VmaRef},
        MmWithUser,
    },
    num::casts::FromSafeCast,
    prelude::*,
    sync::atomic::Relaxed,
};

use crate::mm::{
    cancel::Cancel,
    fault::{Fault, FaultError},
    migrate::vma_is_secretmem,
    mmap::{ExclusiveVma, LockedVma, MmapWriteGuard, Wait},
    numa::Home,
    page::{BLOCK_PAGES, BLOCK_SIZE},
    pagemap::PAGE_SIZE,
    trace,
};
use crate::vram::{large_folios, PoolOps, Use, VramPool};

mod fault;
mod fill;
mod target;
mod vmas;

use fault::fault_to_ram;
use fill::{fill_to_device, fill_to_system, large_step, step};
pub(crate) use target::{place, prefetch, to_system, Memo, Target};
use vmas::UNMIGRATABLE;
pub(crate) use vmas::{check_job_vmas, check_vmas, read_only_anon};

/// What one MIGRATE did.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Pages that now live where they were asked to.
    pub(crate) moved: u64,
    /// Pages that were already there.
    pub(crate) already: u64,
    /// Pages that could not move: the core would not isolate them (pinned,
    /// shared, file-backed, under writeback, ...).
    pub(crate) busy: u64,
    /// Pages that could not move for lack of device memory, or because
    /// the process's dmem cgroup is at its `dmem.max` for the device.
    pub(crate) no_vram: u64,
    /// Those of `no_vram` that the cgroup limit kept out: room on the device
    /// would not help them; room for them is made only under that limit
    /// ([`crate::vram::VramPool::make_room_in_limit`]).
    pub(crate) limited: u64,
    /// 2 MiB folios among the pages moved, which moved whole.
    pub(crate) folios: u64,
    /// Within one step only: nothing moved, because the caller's cgroup
    /// limit refused the 2 MiB folio the step would have moved whole (the
    /// step runs again in small pages).
    pub(crate) refused_block: bool,
}

impl Outcome {
    /// The outcome of a second pass over a range after `first`: the pages
    /// `first` moved (which the second found there already) count as
    /// moved; every page still has one counter.
    fn after(self, first: &Self) -> Self {
        let again = first.moved.min(self.already);
        Self {
            moved: self.moved + again,
            already: self.already - again,
            busy: self.busy,
            no_vram: self.no_vram,
            limited: self.limited,
            folios: self.folios + first.folios,
            refused_block: false,
        }
    }

    /// `n` pages of a VMA the core does not migrate: busy towards a device,
    /// already there towards system RAM (none of them can be on a device).
    fn stayed(dir: Direction, n: u64) -> Self {
        match dir {
            Direction::ToDevice => Self {
                busy: n,
                ..Self::default()
            },
            Direction::ToSystem => Self {
                already: n,
                ..Self::default()
            },
        }
    }
}

/// Where to move.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Direction {
    ToDevice,
    ToSystem,
}

/// Where a migration moves pages and, to a device, for which request (the
/// device's eviction policy records its uses, see `crate::vram::Lru`); to
/// system RAM, on which node when no NUMA policy decides (see
/// `crate::mm::numa`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dest {
    Device(Use),
    System(Home),
    /// An eviction of the pool's 2 MiB block at BAR offset `block`,
    /// through the mapping its folio was migrated in at: its pages only,
    /// to system RAM on `home`, under the mmap lock taken for writing as
    /// `wait` says.
    Evict {
        home: Home,
        block: usize,
        wait: Wait,
    },
}

impl Dest {
    fn dir(self) -> Direction {
        match self {
            Dest::Device(_) => Direction::ToDevice,
            Dest::System(_) | Dest::Evict { .. } => Direction::ToSystem,
        }
    }
}

/// Moves `[start, start + len)` of `mm` (page aligned, checked by the caller)
/// to `pool`'s device memory or back to system RAM, one step at a time, until
/// done or `cancel` says stop.
pub(crate) fn migrate_range(
    pool: &VramPool,
    mm: &MmWithUser,
    start: usize,
    len: usize,
    dest: Dest,
    cancel: &Cancel<'_>,
) -> Result<Outcome> {
    let end = start.checked_add(len).ok_or(EINVAL)?;
    // Check the whole range first: a range with a hole or without access
    // moves nothing. (A mapping changed between steps fails the step.)
    check_vmas(&mm.mmap_read_lock(), start, end, false)?;
    steps(pool, mm, start, end, dest, cancel)
}

/// The pools' way up to the migrations ([`PoolOps`]), installed by
/// `crate::device` when it makes a pool.
pub(crate) struct Migrations;

impl PoolOps for Migrations {
    fn fault_to_ram(&self, pool: &VramPool, fault: Fault<'_>) -> Result<(), FaultError> {
        fault_to_ram(pool, fault)
    }

    fn evict_folio(
        &self,
        pool: &VramPool,
        mm: &MmWithUser,
        (start, block): (usize, usize),
        wait: Wait,
        cancel: &Cancel<'_>,
    ) -> Result<u64> {
        let end = start.checked_add(BLOCK_SIZE).ok_or(EINVAL)?;
        // An eviction: on the node of the device the pages leave. Without
        // checking access first (a device going away takes back even what
        // `PROT_NONE` hides), stopping at the first hole.
        let home = pool.home();
        steps(
            pool,
            mm,
            start,
            end,
            Dest::Evict { home, block, wait },
            cancel,
        )
        .map(|o| o.moved)
    }

    fn sealed(&self, pool: &VramPool) {
        // Only its owner group's devices reach its pages where they are;
        // the sealed pool is withdrawn (only the others are published).
        let group = crate::registry::pools(true);
        for p in group.iter().flatten().flatten() {
            if p.owner() == pool.owner() {
                p.pt_tables().empty();
            }
        }
    }
}

/// The steps of [`migrate_range`], recorded as one `msvm_migrate` trace
/// event.
fn steps(
    pool: &VramPool,
    mm: &MmWithUser,
    start: usize,
    end: usize,
    dest: Dest,
    cancel: &Cancel<'_>,
) -> Result<Outcome> {
    let mut out = Outcome::default();
    let mut addr = start;
    let res = (|| {
        while addr < end {
            cancel.check()?;
            let (step, step_end) = if let Dest::Device(u) = dest {
                device_step(pool, mm, addr, end, u, cancel)?
            } else {
                let (step, step_end) = locked_step(pool, mm, addr, end, dest, false)?;
                (step.ok_or(EAGAIN)?, step_end)
            };
            out.moved += step.moved;
            out.already += step.already;
            out.busy += step.busy;
            out.no_vram += step.no_vram;
            out.limited += step.limited;
            out.folios += step.folios;
            addr = step_end;
        }
        Ok(())
    })();
    trace::Migrate {
        dev: pool.index(),
        to_device: dest.dir() == Direction::ToDevice,
        start,
        end,
        moved: out.moved,
        already: out.already,
        busy: out.busy,
        no_vram: out.no_vram,
        folios: out.folios,
        result: res,
    }
    .fire();
    res.map(|()| out)
}

/// A step towards the device ([`locked_step`]) for request `u`, with the
/// room it needs: the pool grows ([`VramPool::grow`]) only between two tries
/// of the step, with no mmap lock held, and a pool that cannot grow makes
/// room by its eviction policy ([`VramPool::make_room`], also with no mmap
/// lock held). Before the first try, if the pool has no free page at all;
/// after it, if it found no free 2 MiB block for a whole folio (it moved
/// nothing then) or too few free device pages: the step runs once more,
/// over the same range, if the pool has room now (grown, freed meanwhile or
/// made). Pages the process's dmem cgroup limit kept out get room among the
/// replicas and pages charged inside that limit only
/// ([`VramPool::make_room_in_limit`]).
fn device_step(
    pool: &VramPool,
    mm: &MmWithUser,
    addr: usize,
    end: usize,
    u: Use,
    cancel: &Cancel<'_>,
) -> Result<(Outcome, usize)> {
    let dest = Dest::Device(u);
    pool.grow(1, false);
    let room = |pages: usize, large: bool| {
        pool.grow(pages, large) || pool.make_room(pages, large, u, cancel)
    };
    let (step, step_end) = match locked_step(pool, mm, addr, end, dest, true)? {
        (None, _) => {
            room(BLOCK_PAGES, true);
            let (again, again_end) = locked_step(pool, mm, addr, end, dest, false)?;
            (again.ok_or(EAGAIN)?, again_end)
        }
        // Room for the pages the device had none for, made by the eviction
        // policy; for those the cgroup's `dmem.max` kept out, among the
        // replicas and pages charged inside that limit only.
        (Some(first), first_end)
            // CAST: `u64` fits in `usize` on 64-bit kernels.
            if {
                let full = first.no_vram > first.limited
                    && room((first.no_vram - first.limited) as usize, false);
                let limit = first.limited > 0
                    && pool.make_room_in_limit(first.limited as usize, u, cancel);
                full || limit
            } =>
        {
            let (again, again_end) = locked_step(pool, mm, addr, first_end, dest, false)?;
            (again.ok_or(EAGAIN)?.after(&first), again_end)
        }
        (Some(first), first_end) => (first, first_end),
    };
    pool.stats.no_vram.add(step.no_vram, Relaxed);
    pool.stats.cg_limited.add(step.limited, Relaxed);
    Ok((step, step_end))
}

/// The step of `[addr, end)` of `mm` ([`one_step`]) under the mmap lock it
/// needs: held for writing for a whole 2 MiB block, for reading otherwise.
/// `None` (nothing moved) if `may_grow` and a whole 2 MiB folio found no
/// free block in a pool that can grow one.
fn locked_step(
    pool: &VramPool,
    mm: &MmWithUser,
    addr: usize,
    end: usize,
    dest: Dest,
    may_grow: bool,
) -> Result<(Option<Outcome>, usize)> {
    if let Dest::Evict { wait, .. } = dest {
        // Held for writing from the start (the step is a whole folio's
        // block, most likely), waiting only as the eviction may.
        let excl = match wait {
            Wait::Always => MmapWriteGuard::lock_killable(mm)?,
            Wait::Never => MmapWriteGuard::try_lock(mm).ok_or(EBUSY)?,
        };
        let vma = excl.vma_lookup(addr).ok_or(EFAULT)?;
        return one_step(pool, vma.locked(), addr, end, dest, Some(&vma), may_grow);
    }
    let guard = mm.mmap_read_lock();
    let vma = LockedVma::lookup(&guard, addr).ok_or(EFAULT)?;
    if whole_block(&vma, addr, end) {
        // A step that may collect a folio whole may meet a device-private
        // one (or one that becomes so meanwhile): only with every zap of
        // this mm excluded (see `device_folio_mapcount`).
        drop(guard);
        let excl = MmapWriteGuard::lock_killable(mm)?;
        let vma = excl.vma_lookup(addr).ok_or(EFAULT)?;
        one_step(pool, vma.locked(), addr, end, dest, Some(&vma), may_grow)
    } else {
        one_step(pool, vma, addr, end, dest, None, may_grow)
    }
}

/// The step of `[addr, end)` in `vma` (with its mm's mmap lock held; `excl`
/// is `vma` held exclusively, if it is): up to the end of the page table of
/// `addr`, of the VMA or of the range. Only an exclusive step collects
/// folios whole. Returns what it did (`None`: see [`locked_step`]) and
/// where it ended.
fn one_step(
    pool: &VramPool,
    vma: LockedVma<'_>,
    addr: usize,
    end: usize,
    dest: Dest,
    excl: Option<&ExclusiveVma<'_>>,
    may_grow: bool,
) -> Result<(Option<Outcome>, usize)> {
    let dir = dest.dir();
    let step_end = end.min(vma.end()).min((addr / BLOCK_SIZE + 1) * BLOCK_SIZE);
    let n = u64::from_safe_cast((step_end - addr) / PAGE_SIZE);
    if vma.flags() & UNMIGRATABLE != 0 || vma_is_secretmem(&vma) {
        // hugetlb and special (I/O, PFN, mixed) mappings: the core
        // migrates none of their pages; none of them is on a device.
        // secretmem: the kernel must not even read its pages.
        return Ok((Some(Outcome::stayed(dir, n)), step_end));
    }
    let large = excl.filter(|_| large_step(vma, addr, step_end));
    // Only a move to a device waits for the pool to grow a block.
    let grow = may_grow && dir == Direction::ToDevice;
    let r = match dest {
        Dest::Device(u) => step(pool, vma, addr, step_end, large, grow, |p, v, s, e, l| {
            fill_to_device(p, v, s, e, l, u)
        }),
        Dest::System(home) => step(pool, vma, addr, step_end, large, grow, |p, v, s, e, l| {
            fill_to_system(p, v, s, e, l, (home, None))
        }),
        Dest::Evict { home, block, .. } => {
            step(pool, vma, addr, step_end, large, grow, |p, v, s, e, l| {
                fill_to_system(p, v, s, e, l, (home, Some(block)))
            })
        }
    };
    match r {
        // `migrate_vma_setup` refused the VMA for a reason of its own
        // (DAX, say): its pages stay, like those above.
        Err(e) if e == EINVAL => Ok((Some(Outcome::stayed(dir, n)), step_end)),
        r => Ok((r?, step_end)),
    }
}

/// Whether the step from `addr` (towards `end`) in `vma` covers a whole
/// 2 MiB block that may move whole (see [`large_step`], which checks the
/// rest under the lock the step runs with): such a step runs with the mmap
/// lock held for writing.
fn whole_block(vma: &VmaRef, addr: usize, end: usize) -> bool {
    large_folios()
        && addr % BLOCK_SIZE == 0
        && end.min(vma.end()) >= addr + BLOCK_SIZE
        && vma.flags() & flags::NOHUGEPAGE == 0
}
