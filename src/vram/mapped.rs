// SPDX-License-Identifier: GPL-2.0

//! Where this pool's pages are mapped, as the chunks' records say
//! (`records.rs`): written when pages migrate in, and renewed wherever
//! msvm meets a page mapped at an address under a walk's valid sequence
//! (a job's walk, the fault handler's, RESIDENCY's: [`renew`]) or puts one
//! back there (a CPU fault's window: [`renew_met`]), where the record
//! leads nowhere any more: a page `mremap` moved, or one only a fork child
//! maps once its parent unmapped it or exited, is evicted through the
//! mapping that leads to it again.

use kernel::mm::Mm;
use kernel::sync::atomic::Relaxed;

use crate::mm::hmm::Pages;
use crate::mm::page::{PageRef, BLOCK_PAGES};
use crate::mm::pagemap::{self, Pagemap, PAGE_SIZE};

use super::records::{Noting, Renewing};
use super::{Chunk, GroupKey, VramPool};

impl VramPool {
    /// [`renew`] for this device's owner group.
    pub(crate) fn renew(&self, mm: &Mm, pages: &Pages<'_>) {
        renew(self.key, mm, pages);
    }

    /// [`renew_met`] for this device's owner group.
    pub(crate) fn renew_met<'p>(&self, mm: &Mm, met: impl Iterator<Item = Met<'p>>) {
        renew_met(self.key, mm, met);
    }

    /// Notes that the pages `pages` yields, of this pool, were just
    /// migrated in at their addresses of `mm` (each page, its address, and
    /// how many pages it stands for: a 2 MiB folio if more than one):
    /// eviction moves them through that mapping (see `records.rs`). Locks
    /// each chunk's table once per run of pages in it.
    pub(crate) fn note_mapped<'p>(
        &self,
        mm: &Mm,
        pages: impl Iterator<Item = (PageRef<'p>, usize, usize)>,
    ) {
        let mut missed = 0;
        // The chunk of the last page, with its table locked: the pages of
        // a step come mostly from one chunk, found by frame number alone.
        let mut noting: Option<(&Pagemap<Chunk>, Option<Noting<'_>>)> = None;
        for (page, addr, nr) in pages {
            let cached = noting.as_ref().and_then(|(m, _)| m.index_of(page));
            let i = match cached {
                Some(i) => i,
                None => {
                    let Some(map) = pagemap::map_of(page, self.key) else {
                        continue;
                    };
                    let Some(i) = map.index_of(page) else {
                        continue;
                    };
                    // The last chunk's table is let go first.
                    drop(noting.take());
                    noting = Some((map, map.data().records.noting(mm)));
                    i
                }
            };
            let n = noting.as_ref().and_then(|(_, n)| n.as_ref());
            for k in 0..nr {
                if !n.is_some_and(|n| n.set(i + k, addr + k * PAGE_SIZE, nr > 1)) {
                    missed += 1;
                }
            }
        }
        drop(noting);
        self.stats.unrecorded.add(missed, Relaxed);
    }
}

/// Renews the records of the device pages of owner group `key` that
/// `pages` holds: a walk of `mm`, valid while the caller holds its
/// mirror's lock (which `pages` borrows). A page whose record leads
/// nowhere any more (none; another address of `mm`, after an `mremap`; an
/// mm with no users, a fork parent gone; another mm that no longer maps
/// it) is recorded at the address the walk found it at; one that a live
/// mm may share keeps its record (see `Renewing::may_replace`). Locks each
/// chunk's table once per run of pages in it, taking only `GFP_NOWAIT`
/// memory under it (see `records.rs`): a page whose table had no room
/// keeps its record until a later walk.
pub(crate) fn renew(key: &'static GroupKey, mm: &Mm, pages: &Pages<'_>) {
    let start = pages.start();
    let met = pages.iter().enumerate().filter_map(|(k, page)| {
        // A 2 MiB folio mapped whole: `hmm_range_fault` gives the order of
        // a device-private PMD.
        let whole = pages.entry(k).is_some_and(|e| e.map_order() > 0);
        Some(Met {
            page: page?,
            addr: start + k * PAGE_SIZE,
            whole,
            walked: true,
        })
    });
    renew_met(key, mm, met);
}

/// A device page met at an address.
pub(crate) struct Met<'p> {
    pub(crate) page: PageRef<'p>,
    pub(crate) addr: usize,
    /// Its folio (2 MiB) is mapped whole there.
    pub(crate) whole: bool,
    /// Found by a walk, still mapped: whether another mm maps it too can
    /// be asked (a page being migrated is unmapped: whether it is shared
    /// is not known then, and it counts as shared).
    pub(crate) walked: bool,
}

/// [`renew`] of the pages `met` yields, in `mm`: each page stays in use
/// while the caller holds what found it (a walk's sequence, a migration
/// that collected it).
pub(crate) fn renew_met<'p>(key: &'static GroupKey, mm: &Mm, met: impl Iterator<Item = Met<'p>>) {
    // The chunk of the last page, with its table locked, and the records
    // it renewed.
    let mut renewing: Option<(&Pagemap<Chunk>, Renewing<'_>, u64)> = None;
    // The chunk index of the head of the last 2 MiB folio met whole.
    let mut last_folio = None;
    let flush = |r: Option<(&Pagemap<Chunk>, Renewing<'_>, u64)>| {
        if let Some((map, r, n)) = r {
            drop(r);
            map.data().pool().stats.renewed.add(n, Relaxed);
        }
    };
    for m in met {
        let page = m.page;
        if !page.is_device_private() {
            continue;
        }
        let cached = renewing.as_ref().and_then(|(map, ..)| map.index_of(page));
        let i = match cached {
            Some(i) => i,
            None => {
                let Some(map) = pagemap::map_of(page, key) else {
                    continue;
                };
                let Some(i) = map.index_of(page) else {
                    continue;
                };
                flush(renewing.take());
                last_folio = None;
                let records = &map.data().records;
                // The page's own record most likely names `mm` already.
                let hint = records.get(i).map(|r| r.mm);
                renewing = Some((map, records.renewing(mm, hint), 0));
                i
            }
        };
        let Some((map, r, n)) = renewing.as_mut() else {
            continue;
        };
        let shared = || !m.walked || page.maybe_mapped_shared();
        let nr = 1usize << page.folio_order();
        if nr == 1 {
            *n += u64::from(r.renew(i, m.addr, shared));
            continue;
        }
        // A 2 MiB folio: its pages lie aligned in their chunk (`alloc.rs`).
        let head = i - i % nr;
        if m.whole && last_folio == Some(head) {
            continue;
        }
        last_folio = m.whole.then_some(head);
        let changed = r.renew_folio((head, nr), (i, m.addr), m.whole, shared);
        *n += changed;
        if changed > 0 || (m.whole && r.names(head)) {
            // An eviction may reach it again (making room marks a folio
            // whose mm has no users stuck).
            let pool = map.data().pool();
            pool.lru.unstick(pool.block_of(map, head / BLOCK_PAGES));
        }
    }
    flush(renewing);
}
