// SPDX-License-Identifier: GPL-2.0

//! One step of a migration: collect, allocate, copy, install (towards a
//! device or towards system RAM), whole 2 MiB folios where the step may.

use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;
use kernel::sync::atomic::Relaxed;

use crate::mm::migrate::{device_folio_mapcount, Select, VmaMigration};
use crate::mm::mmap::{ExclusiveVma, LockedVma};
use crate::mm::numa::Home;
use crate::mm::page::{NewPages, PageRef, BLOCK_PAGES, BLOCK_SIZE};
use crate::mm::pagemap::PAGE_SIZE;
use crate::sysmem::large_system_folio;
use crate::vram::{Batch, Blit, Clock, Large, PageCopy, Payer, Phase, SizeClass, Use, VramPool};

use super::{whole_block, Outcome};

/// Installs the destinations given for the entries marked in `filled` (the
/// pages each entry stands for; 0: not filled), and counts their pages as
/// moved or, if the core backed out, busy.
fn install(mig: &mut VmaMigration<'_>, filled: &[u16], out: &mut Outcome) {
    mig.pages();
    for (i, &nr) in filled.iter().enumerate().filter(|(_, nr)| **nr > 0) {
        if mig.src(i).migrate() {
            out.moved += u64::from(nr);
        } else {
            out.busy += u64::from(nr);
        }
    }
}

/// The size class of a step that moved `large` 2 MiB folios whole.
fn step_class(large: u64) -> SizeClass {
    if large > 0 {
        SizeClass::Large
    } else {
        SizeClass::Small
    }
}

/// Whether `[start, end)` of `vma` is one whole 2 MiB block whose folio (or
/// hole) a migration may move whole: not in a VMA the process asked to keep
/// free of huge pages (`MADV_NOHUGEPAGE`), and not a device folio that a
/// fork relative maps too (see [`device_folio_mapcount`]: such a folio
/// moves in small pages, the core splitting it first). Callers hold the
/// mmap lock for writing: a folio collected whole may be device-private
/// (see [`super::migrate_range`]).
pub(super) fn large_step(vma: LockedVma<'_>, start: usize, end: usize) -> bool {
    end - start == BLOCK_SIZE
        && whole_block(&vma, start, end)
        && device_folio_mapcount(vma, start) <= 1
}

/// Whether source page `page` of a migration towards `pool` may be copied
/// there: private anonymous memory in RAM, or a device page of `pool`'s
/// owner group. The core collects file and shmem pages too, then refuses
/// to move them to device-private memory after the copy; secretmem pages
/// must not even be read.
fn movable(pool: &VramPool, page: PageRef<'_>) -> bool {
    page.is_anon() || pool.locate(page).is_some()
}

/// One migration step by `fill`: a whole 2 MiB folio (or hole) moves
/// whole where the step allows; if `fill` finds no 2 MiB destination for
/// it, the step returns `None` if `grow` and the pool can grow a block or
/// make room for one (see [`super::device_step`]), and otherwise runs again
/// in small pages (the core splits the folio when it collects it), as it
/// does at once if the caller's cgroup limit refused the folio.
#[allow(clippy::too_many_arguments)]
pub(super) fn step(
    pool: &VramPool,
    vma: LockedVma<'_>,
    start: usize,
    end: usize,
    large: Option<&ExclusiveVma<'_>>,
    grow: bool,
    fill: impl Fn(
        &VramPool,
        LockedVma<'_>,
        usize,
        usize,
        Option<&ExclusiveVma<'_>>,
    ) -> Result<Option<Outcome>>,
) -> Result<Option<Outcome>> {
    match fill(pool, vma, start, end, large)? {
        Some(out) if !out.refused_block => return Ok(Some(out)),
        // Refused by the caller's cgroup limit, which takes some pages
        // still: small pages (not a `large_fallback`: no lack of a block).
        Some(_) => {}
        // No free block now, but the pool may grow one or make room for one
        // (if it holds 2 MiB folios at all).
        None if grow
            && pool.holds_large()
            && (pool.can_grow() || pool.may_make_room_for_block()) =>
        {
            return Ok(None)
        }
        None => pool.stats.large_fallback.add(1, Relaxed),
    }
    let out = fill(pool, vma, start, end, None)?.ok_or(EAGAIN)?;
    // Without `large`, no step asks for a 2 MiB folio.
    debug_assert!(!out.refused_block);
    Ok(Some(out))
}

/// One step towards the device. With `large`, a whole 2 MiB folio (or hole)
/// moves into a whole free 2 MiB block; if there is none, nothing moves and
/// this returns `None`.
pub(super) fn fill_to_device(
    pool: &VramPool,
    vma: LockedVma<'_>,
    start: usize,
    end: usize,
    large: Option<&ExclusiveVma<'_>>,
    u: Use,
) -> Result<Option<Outcome>> {
    let mut clock = Clock::start();
    let mut mig = VmaMigration::setup(vma, start, end, Select::System, large, pool.owner(), None)?;
    clock.lap(Phase::Collect);
    let mut out = Outcome::default();
    let n = mig.npages();
    // Collected pages are in RAM (or unpopulated), or ours already; the
    // rest could not be isolated. A large entry stands for `BLOCK_PAGES`
    // pages, and the entries after it are empty.
    // Entries that get no destination: already ours, or busy.
    let mut skip = [false; BLOCK_PAGES];
    let (mut want, mut block) = (0, None);
    let mut i = 0;
    while i < n {
        let src = mig.src(i);
        let nr = src.nr_pages().min(n - i);
        if !src.migrate() || mig.src_page(i).is_some_and(|p| !movable(pool, p)) {
            // Not collected, or not memory a device takes: the core has
            // not agreed to move it, so nothing of it is read.
            out.busy += u64::from_safe_cast(nr);
            skip[i] = true;
        } else if let Some(off) = mig.src_page(i).and_then(|p| pool.offset_of(p)) {
            // Found here by this request: a use, for the eviction policy.
            pool.note_used(off, u.epoch);
            skip[i] = true;
            out.already += u64::from_safe_cast(nr);
        } else if src.compound() {
            match pool.alloc_large(Payer::Caller)? {
                Large::Folio(b) => block = Some(b),
                // Dropping `mig` restores the source.
                Large::NoBlock => return Ok(None),
                // The caller's cgroup limit: if it takes no page at all,
                // the folio stays whole where it is (the planner may make
                // room among the cgroup's pages and try again); else the
                // step runs again in small pages, as many as the limit
                // takes (no room is made for a block: collecting them
                // splits the folio). Dropping `mig` restores the source.
                Large::Refused => {
                    let nr = u64::from_safe_cast(nr);
                    return Ok(Some(if pool.at_limit()? {
                        Outcome {
                            no_vram: nr,
                            limited: nr,
                            ..Outcome::default()
                        }
                    } else {
                        Outcome {
                            refused_block: true,
                            ..Outcome::default()
                        }
                    }));
                }
            }
        } else {
            want += 1;
        }
        i += nr;
    }
    // Pages of the batch not handed to the migration go back on drop.
    // Charged to the caller's cgroup: this runs in the ioctl of the VM's
    // process (its mm is the one that moves).
    let mut batch = pool.alloc(want, Payer::Caller)?;
    clock.lap(Phase::Alloc);
    // Data the device evicted not long ago, coming back: placed as working
    // set (see `src/vram/shadow.rs`), as decided when the first page finds
    // room (a try that places nothing leaves the shadow to the next).
    let (mut u, mut decided) = (u, false);
    let mut filled = [0u16; BLOCK_PAGES];
    let mut from_peer = [false; BLOCK_PAGES];
    // The copies, run together once every destination is known.
    let mut blit = Blit::new(pool, n)?;
    let mut i = 0;
    while i < n {
        let (at, src) = (i, mig.src(i));
        let nr = src.nr_pages().min(n - i);
        i += nr;
        if skip[at] {
            continue;
        }
        let mut dst = if src.compound() {
            block.as_mut()
        } else {
            Some(&mut batch)
        };
        let Some((dpage, offset)) = dst.as_deref_mut().and_then(Batch::take) else {
            out.no_vram += u64::from_safe_cast(nr);
            if dst.is_some_and(Batch::refused) {
                out.limited += u64::from_safe_cast(nr);
            }
            continue;
        };
        if !core::mem::replace(&mut decided, true) {
            let process = crate::process::of(vma.mm()).map(|p| p.id());
            u = pool.placing(process, start, u);
        }
        pool.note_placed(offset, u);
        let copy = match mig.src_page(at) {
            // An untouched (or zero-page) address.
            None => PageCopy::Zero { off: offset, nr },
            // A page of a peer of our owner group: device to device, BAR
            // to BAR over P2P, no system page involved.
            Some(spage) if pool.locate(spage).is_some() => {
                from_peer[at] = true;
                PageCopy::Peer {
                    src: spage,
                    off: offset,
                    nr,
                }
            }
            Some(spage) => PageCopy::In {
                src: spage,
                off: offset,
                nr,
            },
        };
        blit.push(copy, (at, dpage, src.write()))?;
        // CAST: at most `BLOCK_PAGES` (512), which fits in `u16`.
        filled[at] = nr as u16;
    }
    for (_, (at, dpage, write)) in blit.run()? {
        mig.set_dst(at, dpage, write)?;
    }
    clock.lap(Phase::Copy);
    install(&mut mig, &filled[..n], &mut out);
    let moved = |i: usize| filled[i] > 0 && mig.src(i).migrate();
    // Where eviction finds each page: through this mm, never by frame (a
    // 2 MiB folio through its head page's record:
    // `VramPool::evict_large_folios`).
    pool.note_mapped(
        vma.mm(),
        (0..n).filter(|&i| moved(i)).filter_map(|i| {
            Some((
                mig.dst_page(i)?,
                start + i * PAGE_SIZE,
                usize::from(filled[i]),
            ))
        }),
    );
    let peers: u64 = (0..n)
        .filter(|&i| from_peer[i] && moved(i))
        .map(|i| u64::from(filled[i]))
        .sum();
    let large_moved = u64::from_safe_cast((0..n).filter(|&i| filled[i] > 1 && moved(i)).count());
    // The batch's unused pages go back, then the migration finalizes.
    drop(batch);
    drop(mig);
    clock.lap(Phase::Install);
    pool.stats.phases.step(step_class(large_moved), &clock);
    pool.stats.from_peer.add(peers, Relaxed);
    pool.stats.large_to_device.add(large_moved, Relaxed);
    pool.stats.to_device.add(out.moved, Relaxed);
    out.folios = large_moved;
    Ok(Some(out))
}

/// One step towards system RAM, to `home` when no NUMA policy decides. With
/// `large`, a whole 2 MiB device folio moves into a 2 MiB system folio; if
/// none can be had, nothing moves and this returns `None`.
pub(super) fn fill_to_system(
    pool: &VramPool,
    vma: LockedVma<'_>,
    start: usize,
    end: usize,
    large: Option<&ExclusiveVma<'_>>,
    (home, block): (Home, Option<usize>),
) -> Result<Option<Outcome>> {
    let mut clock = Clock::start();
    // Only the pages of `pool`'s block at that BAR offset, if given.
    let ours = |p: PageRef<'_>| {
        block.is_none_or(|b| {
            pool.offset_of(p)
                .is_some_and(|o| (b..b + BLOCK_SIZE).contains(&o))
        })
    };
    let mut mig = VmaMigration::setup(
        vma,
        start,
        end,
        Select::DevicePrivate,
        large,
        pool.owner(),
        None,
    )?;
    clock.lap(Phase::Collect);
    let mut out = Outcome::default();
    let n = mig.npages();
    let mut filled = [0u16; BLOCK_PAGES];
    let mut pages = NewPages::new(mig.small_collected(), home);
    // The copies, run together once every destination is allocated.
    let mut blit = Blit::new(pool, n)?;
    let mut i = 0;
    while i < n {
        let (at, src) = (i, mig.src(i));
        let nr = src.nr_pages().min(n - i);
        i += nr;
        // The pages of this device and of its owner group's peers are
        // collected; the rest is in RAM (or on a device we do not reach).
        let Some((owner, offset)) = mig
            .src_page(at)
            .filter(|&p| src.migrate() && ours(p))
            .and_then(|p| pool.locate(p))
        else {
            out.already += u64::from_safe_cast(nr);
            continue;
        };
        let addr = start + at * PAGE_SIZE;
        let dst = if src.compound() {
            match large_system_folio(vma.vma(), addr, home) {
                Some(d) => d,
                // Dropping `mig` restores the sources.
                None => return Ok(None),
            }
        } else {
            let Some(d) = pages.take(vma.vma(), addr) else {
                out.busy += 1;
                continue;
            };
            d
        };
        let copy = PageCopy::Out {
            owner,
            off: offset,
            dst,
            nr,
        };
        blit.push(copy, (at, src.write()))?;
        // CAST: at most `BLOCK_PAGES` (512), which fits in `u16`.
        filled[at] = nr as u16;
    }
    clock.lap(Phase::Alloc);
    for (dst, (at, write)) in blit.run()? {
        mig.set_dst(at, dst.ok_or(EINVAL)?, write)?;
    }
    clock.lap(Phase::Copy);
    install(&mut mig, &filled[..n], &mut out);
    // Credit each page to the device it left (this one or a group peer).
    let mut large_moved = 0;
    for i in (0..n).filter(|&i| filled[i] > 0 && mig.src(i).migrate()) {
        if let Some((owner, _)) = mig.src_page(i).and_then(|p| pool.locate(p)) {
            owner.stats.to_system.add(u64::from(filled[i]), Relaxed);
            if filled[i] > 1 {
                owner.stats.large_to_system.add(1, Relaxed);
                large_moved += 1;
            }
        }
    }
    drop(mig);
    clock.lap(Phase::Install);
    pool.stats.phases.step(step_class(large_moved), &clock);
    out.folios = large_moved;
    Ok(Some(out))
}
