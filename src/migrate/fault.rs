// SPDX-License-Identifier: GPL-2.0

//! The CPU fault path: a device page the CPU touched comes back to system
//! RAM, with the 64 KiB around it; a 2 MiB folio comes back whole, or is
//! split.

use kernel::prelude::*;
use kernel::sync::atomic::Relaxed;

use crate::mm::fault::{Fault, FaultError, FaultPage, FaultRelock, Relock};
use crate::mm::migrate::{device_folio_mapcount, Select, VmaMigration};
use crate::mm::mmap::{ExclusiveVma, LockedVma};
use crate::mm::numa::Home;
use crate::mm::page::{NewPages, BLOCK_PAGES, BLOCK_SIZE};
use crate::mm::pagemap::PAGE_SIZE;
use crate::mm::trace;
use crate::sysmem::large_system_folio;
use crate::thrash::{self, Place};
use crate::vram::{Blit, Clock, Met, PageCopy, Phase, SizeClass, VramPool};

/// Bytes the CPU fault path brings back to system RAM at once: the 64 KiB
/// around the faulting address (within its VMA); a 2 MiB device folio
/// mapped whole comes back whole.
const FAULT_WINDOW: usize = 64 * 1024;

/// `migrate_to_ram` of a device page of `pool`: moves this device's pages
/// in the [`FAULT_WINDOW`] around the fault to system RAM.
///
/// A fault on a 2 MiB folio mapped whole (a PMD fault) must exclude every
/// zap of the mm while the folio is collected whole or split (see
/// [`device_folio_mapcount`]), so it trades the fault's lock for the mmap
/// lock held for writing, moves the folio whole into a 2 MiB system
/// folio, and makes the CPU fault again. If no 2 MiB folio is free, or if
/// a fork relative maps the folio too, it splits the folio and its
/// mappings instead, moving nothing: the CPU's retry of the access then
/// faults on a small page, whose window moves in 4 KiB pages. A fault
/// that may not let go of its lock (no `FAULT_FLAG_ALLOW_RETRY`: some
/// kernel callers of `hmm_range_fault` or GUP, and msvm's own walks under
/// the mmap lock, which then fault the range again in a way that may)
/// gets `SIGBUS` on such a folio.
pub(super) fn fault_to_ram(pool: &VramPool, fault: Fault<'_>) -> Result<(), FaultError> {
    if fault.is_pmd() {
        return pmd_fault_to_ram(pool, fault);
    }
    let vma = fault.vma();
    let start = (fault.address() & !(FAULT_WINDOW - 1)).max(vma.start());
    let end = (start + FAULT_WINDOW).min(vma.end());
    fault_range(pool, vma, fault.page(), fault.address(), start, end, None).map(|_| ())
}

/// [`fault_to_ram`] of a PMD fault.
fn pmd_fault_to_ram(pool: &VramPool, fault: Fault<'_>) -> Result<(), FaultError> {
    let address = fault.address();
    // The core maps a large folio whole only where its 2 MiB block lies
    // inside the VMA.
    let large_start = address & !(BLOCK_SIZE - 1);
    let excl = match fault.relock_exclusive() {
        Relock::Exclusive(x) => x,
        Relock::Retry => return Err(FaultError::Retry),
        Relock::Unsupported => {
            kernel::pr_warn_once!(
                "msvm: a fault that cannot let go of the mmap lock hit a 2 MiB device folio: SIGBUS (msvm's own walks then fault it again)\n"
            );
            return Err(FaultError::Sigbus);
        }
    };
    match pmd_fault_exclusive(pool, &excl, address, large_start) {
        // Done, or nothing to do: the retry finds what is there now.
        Ok(()) | Err(FaultError::Retry) => Err(FaultError::Retry),
        Err(e) => Err(excl.fail(e)),
    }
}

/// The work of [`pmd_fault_to_ram`] under `excl`: moves the 2 MiB folio at
/// `large_start` to system RAM whole, or splits it.
fn pmd_fault_exclusive(
    pool: &VramPool,
    excl: &FaultRelock<'_>,
    address: usize,
    large_start: usize,
) -> Result<(), FaultError> {
    // The VMA and the PMD may have changed while the fault waited: look
    // again (the fault's folio stays referenced meanwhile).
    let Some(vma) = excl.vma_lookup(large_start) else {
        return Err(FaultError::Retry);
    };
    if large_start < vma.start() || large_start + BLOCK_SIZE > vma.end() {
        return Err(FaultError::Retry);
    }
    match device_folio_mapcount(vma.locked(), large_start) {
        // No device folio mapped whole there any more.
        0 => return Err(FaultError::Retry),
        1 => {
            let end = large_start + BLOCK_SIZE;
            if fault_range(
                pool,
                vma.locked(),
                excl.page(),
                address,
                large_start,
                end,
                Some(&vma),
            )? {
                return Ok(());
            }
        }
        _ => {}
    }
    pool.stats.large_fallback.add(1, Relaxed);
    excl.split_whole_folio(large_start, pool.owner());
    Ok(())
}

/// Moves this device's pages of `[start, end)` of `vma` to system RAM for
/// the fault on `fault_page` at `address`; with `large`, a 2 MiB device
/// folio moves whole into a 2 MiB system folio if one is free (else nothing
/// moves). Returns whether the faulting page moved.
fn fault_range(
    pool: &VramPool,
    vma: LockedVma<'_>,
    fault_page: FaultPage<'_>,
    address: usize,
    start: usize,
    end: usize,
    large: Option<&ExclusiveVma<'_>>,
) -> Result<bool, FaultError> {
    let mut clock = Clock::start();
    let mut mig = VmaMigration::setup(
        vma,
        start,
        end,
        Select::DevicePrivate,
        large,
        pool.owner(),
        Some(fault_page),
    )
    .map_err(|_| FaultError::Sigbus)?;
    clock.lap(Phase::Collect);
    let fault_at = (address - start) / PAGE_SIZE;
    let n = mig.npages();
    let mut filled = [0u16; BLOCK_PAGES];
    // A CPU fault: pages on the faulting CPU's node, unless a NUMA policy
    // decides.
    let mut pages = NewPages::new(mig.small_collected(), Home::LOCAL);
    // The copies, run together once every destination is allocated.
    let mut blit = Blit::new(pool, n).map_err(|_| FaultError::Oom)?;
    let mut i = 0;
    while i < n {
        let (at, src) = (i, mig.src(i));
        let nr = src.nr_pages().min(n - i);
        i += nr;
        // Only this device's pages are collected; one not collected is
        // being migrated by someone else (the fault is then retried).
        let Some(offset) = mig
            .src_page(at)
            .filter(|_| src.migrate())
            .and_then(|p| pool.offset_of(p))
        else {
            continue;
        };
        let addr = start + at * PAGE_SIZE;
        let dst = if src.compound() {
            // No 2 MiB folio: nothing moves (the caller splits the folio).
            large_system_folio(vma.vma(), addr, Home::LOCAL)
        } else {
            match pages.take(vma.vma(), addr) {
                Some(d) => Some(d),
                // The faulting page must move; its neighbours may stay.
                None if at == fault_at => return Err(FaultError::Oom),
                None => None,
            }
        };
        let Some(dst) = dst else {
            continue;
        };
        let copy = PageCopy::Out {
            owner: pool,
            off: offset,
            dst,
            nr,
        };
        blit.push(copy, (at, src.write()))
            .map_err(|_| FaultError::Oom)?;
        // CAST: at most `BLOCK_PAGES` (512), which fits in `u16`.
        filled[at] = nr as u16;
    }
    clock.lap(Phase::Alloc);
    // A copy engine lost under the copies (`EIO`): the sources are back
    // in place, and the access faults again (the CPU copies then).
    let copied = blit.run().map_err(|e| {
        if e == EIO {
            FaultError::Retry
        } else {
            FaultError::Sigbus
        }
    })?;
    for (dst, (at, write)) in copied {
        mig.set_dst(
            at,
            dst.ok_or(EINVAL).map_err(|_| FaultError::Sigbus)?,
            write,
        )
        .map_err(|_| FaultError::Sigbus)?;
    }
    clock.lap(Phase::Copy);
    // Own pages collected that stay (no memory for them, or a folio with
    // no 2 MiB of RAM) are put back where this mm maps them: eviction
    // follows them here (their record may name another mm or address).
    pool.renew_met(
        vma.mm(),
        (0..n)
            .filter(|&j| filled[j] == 0 && mig.src(j).migrate())
            .filter_map(|j| {
                Some(Met {
                    page: mig.src_page(j).filter(|&p| pool.offset_of(p).is_some())?,
                    addr: start + j * PAGE_SIZE,
                    whole: mig.src(j).nr_pages() > 1,
                    walked: false,
                })
            }),
    );
    mig.pages();
    let (mut moved, mut folios, mut fault_moved) = (0, 0, false);
    for j in (0..n).filter(|&j| filled[j] > 0 && mig.src(j).migrate()) {
        moved += u64::from(filled[j]);
        folios += u64::from(filled[j] > 1);
        fault_moved |= (j..j + usize::from(filled[j])).contains(&fault_at);
    }
    drop(mig);
    clock.lap(Phase::Install);
    let class = if folios > 0 {
        SizeClass::Large
    } else {
        SizeClass::Fault
    };
    pool.stats.phases.step(class, &clock);
    if moved > 0 {
        // The block came home: a move for thrashing detection, which may
        // pin it here (a process without a VM has no state).
        if let Some(p) = crate::process::of(vma.mm()) {
            pool.stats
                .count_thrash(thrash::moved(&p, start, Place::System));
        }
    }
    trace::cpu_fault(pool.index(), address, moved, folios);
    if large.is_some() && !fault_moved {
        // The window will count the fault.
        pool.stats.to_system.add(moved, Relaxed);
        return Ok(false);
    }
    pool.stats.cpu_faults.add(1, Relaxed);
    pool.stats.to_system.add(moved, Relaxed);
    pool.stats.large_to_system.add(folios, Relaxed);
    Ok(true)
}
