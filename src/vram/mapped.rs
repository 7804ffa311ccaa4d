// SPDX-License-Identifier: GPL-2.0

//! Where this pool's pages are mapped, as the chunks' records say
//! (`records.rs`): written when pages migrate in, and renewed wherever
//! msvm meets a page mapped at an address under a walk's valid sequence
//! (a job's walk, the fault handler's, RESIDENCY's: [`renew`]), so that a
//! page `mremap` moved, or one only a fork child maps once its parent let
//! it go, is evicted through the mapping that leads to it again.

use kernel::mm::Mm;
use kernel::sync::atomic::Relaxed;

use crate::mm::hmm::Pages;
use crate::mm::page::PageRef;
use crate::mm::pagemap::{self, Pagemap, PAGE_SIZE};

use super::records::{Noting, Renewing};
use super::{Chunk, GroupKey, VramPool};

impl VramPool {
    /// [`renew`] for this device's owner group.
    pub(crate) fn renew(&self, mm: &Mm, pages: &Pages<'_>) {
        renew(self.key, mm, pages);
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
/// `pages` holds: a walk of `mm`, valid while the
/// caller holds its mirror's lock (which `pages` borrows). A page whose
/// record names another mm or address (moved by `mremap`; shared with a
/// fork child; never recorded) is recorded at the address the walk found
/// it at. Locks each chunk's table once per run of pages in it, taking
/// only `GFP_NOWAIT` memory under it (see `records.rs`): a page whose
/// table had no room keeps its record until a later walk.
pub(crate) fn renew(key: &'static GroupKey, mm: &Mm, pages: &Pages<'_>) {
    let start = pages.start();
    // The chunk of the last page, with its table locked, and the records
    // it renewed.
    let mut renewing: Option<(&Pagemap<Chunk>, Option<Renewing<'_>>, u64)> = None;
    // The chunk index of the head of the last 2 MiB folio renewed.
    let mut last_folio = None;
    let flush = |r: Option<(&Pagemap<Chunk>, Option<Renewing<'_>>, u64)>| {
        if let Some((map, r, n)) = r {
            drop(r);
            map.data().pool().stats.renewed.add(n, Relaxed);
        }
    };
    for (k, page) in pages.iter().enumerate() {
        let Some(page) = page.filter(|p| p.is_device_private()) else {
            continue;
        };
        let cached = renewing.as_ref().and_then(|(m, ..)| m.index_of(page));
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
        let Some((_, Some(r), n)) = renewing.as_mut() else {
            continue;
        };
        let addr = start + k * PAGE_SIZE;
        let nr = 1usize << page.folio_order();
        if nr == 1 {
            *n += u64::from(r.renew(i, addr, false));
            continue;
        }
        // A 2 MiB folio's records go together (a device's teardown moves
        // its pages in one step, grouped by record): every page of it, at
        // the addresses this page's gives, once per folio. Its pages lie
        // aligned in their chunk (`alloc.rs`).
        let head = i - i % nr;
        if last_folio == Some(head) {
            continue;
        }
        last_folio = Some(head);
        let at = addr.wrapping_sub((i - head) * PAGE_SIZE);
        for j in 0..nr {
            *n += u64::from(r.renew(head + j, at.wrapping_add(j * PAGE_SIZE), true));
        }
    }
    flush(renewing);
}
