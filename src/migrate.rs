// SPDX-License-Identifier: GPL-2.0

//! The migration planner: moves a range of a process's address space to a
//! device's VRAM or back, one page table (2 MiB, [`MAX_PAGES`]) at a time,
//! with one VRAM allocation and one copy pass per step; and brings a page
//! home when the CPU touches it (`migrate_to_ram`).
//!
//! Fault-back window: the 64 KiB block around the faulting address (within
//! its VMA), 16 pages per fault: a CPU walking device data sequentially
//! takes one fault per block instead of one per page, and a stray access
//! moves at most 64 KiB. The explicit MIGRATE remains the fast path.
//!
//! # Lock order
//!
//! Callers hold the mmap read lock; the VRAM pool's locks nest inside (see
//! `src/vram.rs`).

use kernel::{
    mm::{
        virt::{flags, VmaRef},
        MmWithUser, MmapReadGuard,
    },
    prelude::*,
    sync::atomic::Relaxed,
};

use crate::mm::{
    migrate::{Entry, Select, VmaMigration, MAX_PAGES},
    page::NewPage,
    pagemap::{Fault, FaultError, PAGE_SIZE},
};
use crate::vram::VramPool;

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
    /// Pages that could not move for lack of VRAM.
    pub(crate) no_vram: u64,
}

/// Where to move.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Direction {
    ToDevice,
    ToSystem,
}

/// Moves `[start, start + len)` of `mm` (page aligned, checked by the caller)
/// to `pool`'s VRAM or back to system RAM.
pub(crate) fn migrate_range(
    pool: &VramPool<'_>,
    mm: &MmWithUser,
    start: usize,
    len: usize,
    dir: Direction,
) -> Result<Outcome> {
    let end = start.checked_add(len).ok_or(EINVAL)?;
    let mut out = Outcome::default();
    let guard = mm.mmap_read_lock();
    // Check the whole range first: an error moves nothing.
    check_vmas(&guard, start, end, false)?;
    let mut addr = start;
    while addr < end {
        let vma = guard.vma_lookup(addr).ok_or(EFAULT)?;
        let step_end = end
            .min(vma.end())
            .min((addr / (MAX_PAGES * PAGE_SIZE) + 1) * MAX_PAGES * PAGE_SIZE);
        let step = match dir {
            Direction::ToDevice => step_to_device(pool, vma, addr, step_end)?,
            Direction::ToSystem => step_to_system(pool, vma, addr, step_end)?,
        };
        out.moved += step.moved;
        out.already += step.already;
        out.busy += step.busy;
        out.no_vram += step.no_vram;
        addr = step_end;
    }
    Ok(out)
}

/// Checks that `[start, end)` is mapped without holes (`EFAULT`) and
/// readable, and writable if `write` (`EACCES`).
pub(crate) fn check_vmas(
    guard: &MmapReadGuard<'_>,
    start: usize,
    end: usize,
    write: bool,
) -> Result {
    let mut addr = start;
    while addr < end {
        let vma = guard.vma_lookup(addr).ok_or(EFAULT)?;
        let need = if write {
            flags::READ | flags::WRITE
        } else {
            flags::READ
        };
        if vma.flags() & need != need {
            return Err(EACCES);
        }
        addr = vma.end();
    }
    Ok(())
}

/// Installs the destinations given for the entries marked in `filled`, and
/// counts each of them as moved or, if the core backed out, busy.
fn install(mig: &mut VmaMigration<'_>, filled: &[bool], out: &mut Outcome) {
    mig.pages();
    for (i, _) in filled.iter().enumerate().filter(|(_, f)| **f) {
        if mig.src(i).migrate() {
            out.moved += 1;
        } else {
            out.busy += 1;
        }
    }
}

fn step_to_device(pool: &VramPool<'_>, vma: &VmaRef, start: usize, end: usize) -> Result<Outcome> {
    let mut mig = VmaMigration::setup(vma, start, end, Select::System, pool.owner(), None)?;
    let mut out = Outcome::default();
    let n = mig.npages();
    let mut filled = [false; MAX_PAGES];
    let mut want = 0;
    // Collected pages are in RAM (or unpopulated), or ours already; the
    // rest could not be isolated.
    let mut ours = [false; MAX_PAGES];
    for (i, own) in ours.iter_mut().enumerate().take(n) {
        let src = mig.src(i);
        if !src.migrate() {
            out.busy += 1;
        } else if src.page().is_some_and(|p| pool.offset_of(p).is_some()) {
            *own = true;
            out.already += 1;
        } else {
            want += 1;
        }
    }
    // Pages of the batch not handed to the migration go back on drop.
    let mut batch = pool.alloc(want)?;
    let mut stage = KBox::new([0u8; PAGE_SIZE], GFP_KERNEL)?;
    let mut from_peer = [false; MAX_PAGES];
    for (i, own) in ours.iter().enumerate().take(n) {
        let src = mig.src(i);
        if !src.migrate() || *own {
            continue;
        }
        let Some((dpage, offset)) = batch.peek() else {
            out.no_vram += 1;
            continue;
        };
        match src.page() {
            Some(spage) => match pool.locate(spage) {
                // A page of a peer of our owner group: device to device,
                // BAR to BAR over P2P, no system page involved.
                Some((peer, poff)) => {
                    pool.bar()
                        .copy_from_bar(offset, peer.bar(), poff, &mut stage)?;
                    from_peer[i] = true;
                }
                None => pool.bar().copy_from_page(offset, spage)?,
            },
            // An untouched (or zero-page) address.
            None => pool.bar().clear_page(offset)?,
        }
        batch.take();
        mig.set_dst(i, Entry::to(dpage, src.write()));
        filled[i] = true;
    }
    install(&mut mig, &filled[..n], &mut out);
    let peers = (0..n)
        .filter(|&i| from_peer[i] && mig.src(i).migrate())
        .count() as u64;
    pool.stats.from_peer.add(peers, Relaxed);
    pool.stats.to_device.add(out.moved, Relaxed);
    pool.stats.no_vram.add(out.no_vram, Relaxed);
    Ok(out)
}

fn step_to_system(pool: &VramPool<'_>, vma: &VmaRef, start: usize, end: usize) -> Result<Outcome> {
    let mut mig = VmaMigration::setup(vma, start, end, Select::DevicePrivate, pool.owner(), None)?;
    let mut out = Outcome::default();
    let n = mig.npages();
    let mut filled = [false; MAX_PAGES];
    for (i, fill) in filled.iter_mut().enumerate().take(n) {
        let src = mig.src(i);
        // The pages of this device and of its owner group's peers are
        // collected; the rest is in RAM (or on a device we do not reach).
        let Some((owner, offset)) = src
            .page()
            .filter(|_| src.migrate())
            .and_then(|p| pool.locate(p))
        else {
            out.already += 1;
            continue;
        };
        let Some(dst) = NewPage::for_vma(vma, start + i * PAGE_SIZE) else {
            out.busy += 1;
            continue;
        };
        owner.bar().copy_to_page(offset, dst.page())?;
        mig.set_dst(i, Entry::to(dst.into_migration(), src.write()));
        *fill = true;
    }
    install(&mut mig, &filled[..n], &mut out);
    pool.stats.to_system.add(out.moved, Relaxed);
    Ok(out)
}

/// Bytes the CPU fault path brings home at once: the 64 KiB block around
/// the faulting address (within its VMA).
const FAULT_WINDOW: usize = 64 * 1024;

/// `migrate_to_ram` of a device page of `pool`: brings home this device's
/// pages in the [`FAULT_WINDOW`] around the fault.
pub(crate) fn fault_to_ram(pool: &VramPool<'_>, fault: &Fault<'_>) -> Result<(), FaultError> {
    let vma = fault.vma();
    let start = (fault.address() & !(FAULT_WINDOW - 1)).max(vma.start());
    let end = (start + FAULT_WINDOW).min(vma.end());
    let mut mig = VmaMigration::setup(
        vma,
        start,
        end,
        Select::DevicePrivate,
        pool.owner(),
        Some(fault.page()),
    )
    .map_err(|_| FaultError::Sigbus)?;
    let mut moved = 0;
    for i in 0..mig.npages() {
        let src = mig.src(i);
        // Only this device's pages are collected; one not collected is
        // being migrated by someone else (the fault is then retried).
        let Some(offset) = src
            .page()
            .filter(|_| src.migrate())
            .and_then(|p| pool.offset_of(p))
        else {
            continue;
        };
        let addr = start + i * PAGE_SIZE;
        let Some(dst) = NewPage::for_vma(vma, addr) else {
            // The faulting page must come home; its neighbours may stay.
            if addr == fault.address() & !(PAGE_SIZE - 1) {
                return Err(FaultError::Oom);
            }
            continue;
        };
        pool.bar()
            .copy_to_page(offset, dst.page())
            .map_err(|_| FaultError::Sigbus)?;
        mig.set_dst(i, Entry::to(dst.into_migration(), src.write()));
        moved += 1;
    }
    mig.pages();
    drop(mig);
    pool.stats.cpu_faults.add(1, Relaxed);
    pool.stats.to_system.add(moved, Relaxed);
    Ok(())
}
