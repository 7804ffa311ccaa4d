// SPDX-License-Identifier: GPL-2.0

//! Eviction: every page of a chunk to system RAM (or into other chunks, for
//! a consolidation), 2 MiB folios first through the mms that map them.

use kernel::mm::{Mm, MmWithUser};
use kernel::num::casts::FromSafeCast;
use kernel::prelude::*;
use kernel::sync::atomic::Relaxed;

use crate::mm::cancel::Cancel;
use crate::mm::migrate::{device_folio_mapcount, Select, VmaMigration};
use crate::mm::mmap::{LockedVma, MmapRead, Wait};
use crate::mm::page::{How, NewPage, BLOCK_PAGES, BLOCK_SIZE};
use crate::mm::pagemap::{self, Pagemap, PAGE_SIZE};
use crate::mm::trace::{self, EvictReason};

use super::blit::{Blit, PageCopy};

use super::window::evict_window;
use super::{chunk_of, Batch, Chunk, VramPool};

/// What a drain moves to system RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Drain {
    /// Everything, 2 MiB folios too, waiting for system memory as long as
    /// it takes: the data has nowhere else to go (a device going away).
    /// Pages go through the mms they are recorded in; what is left
    /// becomes an orphan (`orphans.rs`).
    All,
    /// Small pages only, as system memory comes without waiting, and only
    /// through their mms: an eviction that may fail (making room, see
    /// `room.rs`). The caller makes sure no 2 MiB folio is in the range (a
    /// reserved block).
    Room,
}

/// What draining a chunk did, in pages.
#[derive(Default, Debug)]
pub(super) struct Drained {
    /// Moved to other chunks of the pool.
    pub(super) moved: usize,
    /// Sent to system RAM.
    pub(super) to_system: usize,
    /// Moved through the mm they are mapped in (of `moved` and
    /// `to_system`).
    pub(super) by_mm: usize,
}

/// Where the pages of one drain go.
struct Dest<'b> {
    /// Other chunks of the pool (a consolidation); system RAM if `None`.
    batch: Option<&'b mut Batch>,
    how: Drain,
}

/// A page of a drain through its mm: the index of its mm in the chunk's
/// records, and its address there.
#[derive(Clone, Copy)]
struct Mapped {
    m: usize,
    addr: usize,
}

impl VramPool {
    /// Moves every page of chunk `map` that is in use back to system RAM
    /// through the mm it is recorded in. Returns how many pages moved and
    /// how many are still in use afterwards (no record leads to them, a
    /// migration in flight holds them, or a 2 MiB folio found no 2 MiB
    /// system folio to go to).
    fn evict(&self, map: &Pagemap<Chunk>) -> (usize, Result<usize>) {
        let (d, res) = self.drain_counted(map, 0, map.npages(), None, Drain::All, &Cancel::task());
        self.stats
            .evicted
            .add(u64::from_safe_cast(d.to_system), Relaxed);
        (d.to_system, res.map(|()| map.used()))
    }

    /// Moves every page of chunk `map` that is in use into the pages of
    /// `batch` (other chunks of this pool: device to device, BAR to BAR;
    /// large folios stay, see [`super::choose_victim`]) or, without a batch, to
    /// system RAM.
    pub(super) fn drain(&self, map: &Pagemap<Chunk>, batch: Option<Batch>) -> Result<Drained> {
        self.drain_range(map, 0, map.npages(), batch, Drain::All, &Cancel::task())
    }

    /// [`VramPool::drain`] of pages `[start, end)` of chunk `map` only, the
    /// way `how` says; making room stops on `cancel`.
    ///
    /// Pages move through the mm and address each is recorded at
    /// (`records.rs`), with that mm's mmap lock held: never by their frames
    /// alone, which Linux 7.3 does without keeping the pages' `anon_vma`
    /// alive. A page whose record is stale, or whose mm is busy (a
    /// consolidation only tries the lock: it runs for reclaim) or gone,
    /// stays where it is (a device going away then makes its chunk an
    /// orphan: `orphans.rs`).
    pub(super) fn drain_range(
        &self,
        map: &Pagemap<Chunk>,
        start: usize,
        end: usize,
        batch: Option<Batch>,
        how: Drain,
        cancel: &Cancel<'_>,
    ) -> Result<Drained> {
        let (d, res) = self.drain_counted(map, start, end, batch, how, cancel);
        res.map(|()| d)
    }

    /// [`VramPool::drain_range`], with what it moved even if it failed
    /// part of the way.
    fn drain_counted(
        &self,
        map: &Pagemap<Chunk>,
        start: usize,
        end: usize,
        mut batch: Option<Batch>,
        how: Drain,
        cancel: &Cancel<'_>,
    ) -> (Drained, Result) {
        let end = end.min(map.npages());
        let mut d = Drained::default();
        let dest = Dest {
            batch: batch.as_mut(),
            how,
        };
        let res = self.drain_mapped(map, start, end, dest, cancel, &mut d);
        self.stats
            .to_system
            .add(u64::from_safe_cast(d.to_system), Relaxed);
        self.stats.by_mm.add(u64::from_safe_cast(d.by_mm), Relaxed);
        (d, res)
    }

    /// Moves the pages of `[start, end)` of chunk `map` that have records
    /// through their mms (see [`VramPool::drain_range`]), one mm at a time,
    /// one run of consecutive addresses at a time.
    fn drain_mapped(
        &self,
        map: &Pagemap<Chunk>,
        start: usize,
        end: usize,
        mut dest: Dest<'_>,
        cancel: &Cancel<'_>,
        d: &mut Drained,
    ) -> Result {
        let records = &map.data().records;
        let mut pages = KVVec::new();
        for i in start..end {
            let Some(r) = records.get(i) else {
                continue;
            };
            pages.push(
                Mapped {
                    m: r.mm,
                    addr: r.addr,
                },
                GFP_KERNEL,
            )?;
        }
        pages.sort_unstable_by_key(|p| (p.m, p.addr));
        // A device going away waits for every mm's lock. Making room (in
        // an ioctl, under `shrink_lock`, which an unbind of any device may
        // come to wait for) and a consolidation (for reclaim) never wait
        // for another process's mmap lock: a busy mm's pages stay.
        let wait = match (dest.how, dest.batch.is_some()) {
            (Drain::All, false) => Wait::Always,
            _ => Wait::Never,
        };
        let mut rest = &pages[..];
        while let Some(first) = rest.first() {
            let n = rest.iter().take_while(|p| p.m == first.m).count();
            let (group, after) = rest.split_at(n);
            rest = after;
            // A device going away moves what it can whatever happens; the
            // others stop when they must.
            if dest.how == Drain::Room && cancel.check().is_err() {
                break;
            }
            let Some(mm) = records.mm_at(first.m) else {
                continue;
            };
            // An mm whose users are gone is being torn down: its pages go
            // with it (a device going away leaves them orphans meanwhile).
            let Some(mm) = mm.mmget_not_zero() else {
                continue;
            };
            // Its last user may be this reference now: the mm's teardown
            // then runs on a workqueue, not under this caller's locks.
            let mm = MmWithUser::into_mmput_async(mm);
            // A busy mm (only tried) keeps its pages here.
            let Ok(guard) = MmapRead::lock(&mm, wait) else {
                continue;
            };
            let mut group = group;
            while let Some(p) = group.first() {
                // A run: consecutive addresses within one 2 MiB block of
                // the address space (a page table's worth).
                let len = group
                    .iter()
                    .enumerate()
                    .take_while(|(k, q)| {
                        q.addr == p.addr + k * PAGE_SIZE
                            && q.addr / BLOCK_SIZE == p.addr / BLOCK_SIZE
                    })
                    .count();
                group = &group[len..];
                let (mut s, e) = (p.addr, p.addr + len * PAGE_SIZE);
                while s < e {
                    let Some(vma) = guard.vma_lookup(s) else {
                        s += PAGE_SIZE;
                        continue;
                    };
                    let ee = e.min(vma.end());
                    // A consolidation leaves a 2 MiB device folio mapped
                    // whole where it is (see `choose_victim`): a small-page
                    // migration would split it.
                    let whole = device_folio_mapcount(vma, s & !(BLOCK_SIZE - 1)) != 0;
                    // Nor does making room (its reserved block holds no
                    // whole folio: one there is another block's, reached
                    // through a stale record); a device going away splits
                    // it.
                    let keep = dest.batch.is_some() || dest.how == Drain::Room;
                    if !(whole && keep) {
                        self.drain_run(map, start, end, vma, &mm, s, ee, &mut dest, d)?;
                    }
                    s = ee;
                }
                // The pages of the run that did not move stay: their
                // records were stale, or they were busy. A device going
                // away goes on whatever happens (`Cancel::task` reschedules).
                if dest.how == Drain::All {
                    let _ = Cancel::task().check();
                } else if cancel.check().is_err() {
                    break;
                }
            }
            drop(guard);
        }
        Ok(())
    }

    /// Moves the pages of chunk `map` (pages `[start, end)` of it) that
    /// `[s, e)` of `vma` maps, with the mmap lock of `mm` held (the
    /// `LockedVma`): a migration of that VMA range, in which every other page
    /// found is left where it is.
    #[allow(clippy::too_many_arguments)]
    fn drain_run(
        &self,
        map: &Pagemap<Chunk>,
        start: usize,
        end: usize,
        vma: LockedVma<'_>,
        mm: &Mm,
        s: usize,
        e: usize,
        dest: &mut Dest<'_>,
        d: &mut Drained,
    ) -> Result {
        let mig = VmaMigration::setup(vma, s, e, Select::DevicePrivate, None, self.owner(), None);
        let mut mig = match mig {
            Ok(m) => m,
            // A VMA the core will not migrate (DAX, say): no page of ours.
            Err(e) if e == EINVAL => return Ok(()),
            Err(e) => return Err(e),
        };
        let bar_base = Chunk::base(map);
        let n = mig.npages();
        // Whether each entry got a destination in another chunk (true) or
        // in system RAM (false).
        let mut filled = [None; BLOCK_PAGES];
        // The copies, run together once every destination is known: tags
        // say the entry, its chunk destination if it has one, and whether
        // it is writable.
        let mut blit = Blit::new(self, n)?;
        for (j, f) in filled.iter_mut().enumerate().take(n) {
            let src = mig.src(j);
            // Ours (this chunk, this range), and collected: the core never
            // hands a small-page migration a whole folio.
            let Some(i) = mig
                .src_page(j)
                .filter(|_| src.migrate() && !src.compound())
                .and_then(|p| {
                    pagemap::map_of(p, self.key)
                        .filter(|m| core::ptr::eq(*m, map))
                        .and(map.index_of(p))
                })
                .filter(|i| (start..end).contains(i))
            else {
                continue;
            };
            let from = bar_base + i * PAGE_SIZE;
            if let Some(batch) = dest.batch.as_mut() {
                let Some((dpage, off)) = batch.take() else {
                    continue;
                };
                let copy = PageCopy::Within {
                    from,
                    to: off,
                    nr: 1,
                };
                blit.push(copy, (j, Some(dpage), src.write()))?;
                *f = Some(true);
                continue;
            }
            // `Must` waits for memory rather than fail: the data has
            // nowhere else to go; making room only takes what comes. On
            // this device's node, unless the VMA's NUMA policy says where.
            let how = match dest.how {
                Drain::All => How::Must,
                Drain::Room => How::Try,
            };
            let dst = NewPage::home(Some((vma.vma(), s + j * PAGE_SIZE)), self.home(), how);
            let Some(dst) = dst else {
                continue;
            };
            let copy = PageCopy::Out {
                owner: self,
                off: from,
                dst,
                nr: 1,
            };
            blit.push(copy, (j, None, src.write()))?;
            *f = Some(false);
        }
        for (to_system, (j, to_chunk, write)) in blit.run()? {
            mig.set_dst(j, to_chunk.or(to_system).ok_or(EINVAL)?, write)?;
        }
        if filled.iter().any(Option::is_some) {
            evict_window();
        }
        mig.pages();
        for (j, f) in filled.iter().enumerate().take(n) {
            let Some(to_chunk) = *f else {
                continue;
            };
            if !mig.src(j).migrate() {
                // The core backed out (an unexpected reference): it stays.
                continue;
            }
            d.by_mm += 1;
            if !to_chunk {
                d.to_system += 1;
                continue;
            }
            d.moved += 1;
            // The charge and the record follow the page into the other
            // chunk, before the old page is freed (at finalize).
            let i = mig.src_page(j).and_then(|p| map.index_of(p));
            let to = mig.dst_page(j).and_then(|p| chunk_of(p, self.key));
            if let (Some(i), Some((to, k))) = (i, to) {
                if let Some(c) = map.data().charges.take(i) {
                    to.charges.put(k, c);
                }
                if to.records.note(k, 1, mm, s + j * PAGE_SIZE, false) == 0 {
                    self.stats.unrecorded.add(1, Relaxed);
                }
            }
        }
        drop(mig);
        Ok(())
    }

    /// Evicts chunk `c` through the mms its pages are recorded in until
    /// no page of it is in use, or passes made no progress (moved nothing,
    /// and no page was freed meanwhile) for [`STALL_MS`], retrying with
    /// backoff (1 ms doubling to 100 ms): pages busy in a migration, a 2
    /// MiB folio that found no 2 MiB of RAM, or an mm whose exit frees
    /// them, may yet go. What is left then is no process's that msvm can
    /// name, or stays busy: the pool's teardown makes it an orphan
    /// (`orphans.rs`).
    pub(super) fn evict_all(&self, c: usize, map: &Pagemap<Chunk>) {
        let mut wait_ms = 1;
        let mut stalled_ms = 0;
        let used = u64::from_safe_cast(map.used());
        let mut before = map.used();
        loop {
            let (moved, left) = self.evict(map);
            let now = match left {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    if stalled_ms == 0 {
                        pr_err!("msvm: chunk {c}: eviction failed: {e:?}, retrying\n");
                    }
                    map.used()
                }
            };
            stalled_ms = if moved > 0 || now < before {
                0
            } else {
                stalled_ms + wait_ms
            };
            before = now;
            if stalled_ms >= STALL_MS {
                break;
            }
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(wait_ms));
            wait_ms = (wait_ms * 2).min(100);
        }
        let moved = used.saturating_sub(u64::from_safe_cast(map.used()));
        if moved > 0 {
            let offset = self.chunk_offset(c);
            trace::evict(self.index(), EvictReason::Teardown, offset, moved);
        }
    }
}

/// How long a device's teardown retries a chunk's pages that do not move
/// before it leaves them to the orphanage, in milliseconds.
const STALL_MS: i64 = 1000;
