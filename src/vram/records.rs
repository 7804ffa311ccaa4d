// SPDX-License-Identifier: GPL-2.0

//! Where each page of a chunk is mapped: the mm and the address it was
//! migrated in at (or moved to by a consolidation), so that eviction moves
//! it through that mm, with the mmap lock held and the VMA found under it
//! (`evict.rs`), and never by its page frame alone.
//!
//! Linux 7.3's `migrate_device_range()` (and `migrate_device_pfns()`)
//! unmap pages by frame with no
//! reference on their `anon_vma`: an exit or `munmap` of the last VMA that
//! maps a page, while it migrates, frees the `anon_vma` that finalize's
//! `remove_migration_ptes()` then walks. A migration of a VMA found under
//! its mm's mmap lock cannot meet that: the VMA stays linked (and its
//! `anon_vma` chain with it, which holds the folio's `anon_vma`) until the
//! lock is let go.
//!
//! A record is a hint, checked when used: the page may have been unmapped,
//! remapped (`mremap`) or shared with a fork child since. Eviction moves
//! only the frames it wants among what it finds at the recorded address,
//! and leaves a page whose record is stale where it is.
//!
//! # Lock order
//!
//! [`Records::mms`] is a leaf mutex: taken with nothing of the pool held
//! but, at most, `shrink_lock` and an mmap lock; nothing is allocated
//! under it but the table's own growth and the scratch of a clean-up
//! ([`Records::mm_index`]), and an mm it lets go of is dropped under it
//! (`mmdrop`, process context). The page slots are atomics, also cleared
//! by `folio_free` in any context.
//!
//! A table keeps up to [`KEPT_MMS`] mms that no page names any more (their
//! `mm_struct`s, not their memory) until a new mm needs the room or the
//! chunk's pagemap goes.

use kernel::mm::Mm;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::aref::ARef;
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::sync::{Mutex, MutexGuard};

use crate::mm::page::PAGE_SIZE;

/// The mms one chunk may name at once: an index fits in a page slot's low
/// bits, beside a page-aligned address.
const MAX_MMS: usize = PAGE_SIZE - 1;

/// The mms a chunk keeps before it lets go of those no page names any more.
const KEPT_MMS: usize = 16;

/// The bit of a page slot that says the page was migrated in as part of a
/// 2 MiB folio (user addresses are far below it).
const LARGE: usize = 1 << (usize::BITS - 1);

/// A page slot: its address (page aligned) or'ed with its mm's index in
/// [`Records::mms`] plus one, and [`LARGE`] for a page of a 2 MiB folio;
/// 0 for no record.
fn encode(mm: usize, addr: usize, large: bool) -> usize {
    (addr & !(PAGE_SIZE - 1) & !LARGE) | (mm + 1) | if large { LARGE } else { 0 }
}

/// What a page slot records, if anything.
fn decode(v: usize) -> Option<Record> {
    let mm = v & (PAGE_SIZE - 1);
    (mm != 0).then(|| Record {
        mm: mm - 1,
        addr: v & !(PAGE_SIZE - 1) & !LARGE,
        large: v & LARGE != 0,
    })
}

/// A page's record: its mm's index in the table, its address there, and
/// whether it was migrated in as part of a 2 MiB folio (it may have been
/// split since).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) mm: usize,
    pub(crate) addr: usize,
    pub(crate) large: bool,
}

/// The records of one chunk's pages.
#[pin_data]
pub(crate) struct Records {
    /// One slot per page (see [`encode`]).
    pages: KVVec<Atomic<usize>>,
    /// The mms the slots name, by index. An entry no slot names any more is
    /// reused when the table is full ([`Records::mm_index`]).
    #[pin]
    mms: Mutex<KVec<Option<ARef<Mm>>>>,
}

impl Records {
    /// Records for `npages` pages, none yet.
    pub(crate) fn new(npages: usize) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            pages: {
                let mut v = KVVec::with_capacity(npages, GFP_KERNEL)?;
                for _ in 0..npages {
                    v.push(Atomic::new(0), GFP_KERNEL)?;
                }
                v
            },
            mms <- new_mutex!(KVec::new()),
        }? Error)
    }

    /// The index of `mm` in `mms`, added if it is not there: `None` if the
    /// table is full of mms that pages still name (that page then gets no
    /// record), or on want of memory. Past [`KEPT_MMS`] entries, the mms no
    /// page names any more are let go first, so that a chunk that outlives
    /// many processes keeps few of their `mm_struct`s.
    fn mm_index(&self, mms: &mut KVec<Option<ARef<Mm>>>, mm: &Mm) -> Option<usize> {
        if let Some(i) = mms
            .iter()
            .position(|m| m.as_ref().is_some_and(|m| core::ptr::eq(&**m, mm)))
        {
            return Some(i);
        }
        if mms.len() >= KEPT_MMS && !mms.iter().any(Option::is_none) {
            self.forget_unnamed(mms);
        }
        if let Some(i) = mms.iter().position(Option::is_none) {
            mms[i] = Some(ARef::from(mm));
            return Some(i);
        }
        if mms.len() < MAX_MMS && mms.push(Some(ARef::from(mm)), GFP_KERNEL).is_ok() {
            return Some(mms.len() - 1);
        }
        None
    }

    /// Lets go of the mms of `mms` that no page slot names (slots cleared
    /// by `folio_free` only ever stop naming one; new ones are written
    /// under the lock that `mms` is borrowed from).
    fn forget_unnamed(&self, mms: &mut KVec<Option<ARef<Mm>>>) {
        let Ok(mut named) = KVec::from_elem(false, mms.len(), GFP_KERNEL) else {
            return;
        };
        for v in self.pages.iter() {
            if let Some(r) = decode(v.load(Relaxed)) {
                if let Some(n) = named.get_mut(r.mm) {
                    *n = true;
                }
            }
        }
        for (m, n) in mms.iter_mut().zip(named.iter()) {
            if !n {
                *m = None;
            }
        }
    }

    /// Records that pages `first..first + nr` are mapped at `addr` (and the
    /// pages after it) of `mm`, as a 2 MiB folio if `large`. Returns how
    /// many got a record.
    pub(crate) fn note(&self, first: usize, nr: usize, mm: &Mm, addr: usize, large: bool) -> usize {
        self.noting(mm).map_or(0, |n| {
            (first..first + nr)
                .zip((0..).map(|k| addr + k * PAGE_SIZE))
                .filter(|&(i, a)| n.set(i, a, large))
                .count()
        })
    }

    /// A way to record pages of `mm`, the table locked while it lives (so
    /// that the mm's entry is not let go before a page names it); `None`
    /// if the table has no room for `mm`.
    pub(crate) fn noting(&self, mm: &Mm) -> Option<Noting<'_>> {
        let mut mms = self.mms.lock();
        let m = self.mm_index(&mut mms, mm)?;
        Some(Noting {
            records: self,
            m,
            _mms: mms,
        })
    }

    /// Forgets the records of pages `first..first + nr` (freed). Any
    /// context.
    pub(crate) fn forget(&self, first: usize, nr: usize) {
        for k in first..first + nr {
            if let Some(slot) = self.pages.get(k) {
                slot.store(0, Relaxed);
            }
        }
    }

    /// The record of page `i`, if any ([`Records::mm_at`] gives its mm).
    pub(crate) fn get(&self, i: usize) -> Option<Record> {
        decode(self.pages.get(i)?.load(Relaxed))
    }

    /// Pages whose record names the mm at `mm` (a key only; a hint, as
    /// every record: a page unmapped since still counts until it is freed,
    /// and an index the table gives another mm while the pages are counted
    /// counts that mm's). Takes the table, a leaf.
    pub(crate) fn count_of(&self, mm: usize) -> usize {
        // CAST: an address, compared as a key only.
        let m = self
            .mms
            .lock()
            .iter()
            .position(|x| x.as_ref().is_some_and(|x| x.as_raw() as usize == mm));
        let Some(m) = m else { return 0 };
        self.pages
            .iter()
            .filter(|s| decode(s.load(Relaxed)).is_some_and(|r| r.mm == m))
            .count()
    }

    /// The mm at index `m` of the table, held by its count of references
    /// (not its users: see `Mm::mmget_not_zero`).
    pub(crate) fn mm_at(&self, m: usize) -> Option<ARef<Mm>> {
        self.mms.lock().get(m)?.clone()
    }
}

/// Records being written for one mm ([`Records::noting`]).
pub(crate) struct Noting<'a> {
    records: &'a Records,
    /// The mm's index in the table.
    m: usize,
    /// The table, locked.
    _mms: MutexGuard<'a, KVec<Option<ARef<Mm>>>>,
}

impl Noting<'_> {
    /// Records that page `i` is mapped at `addr` of the mm, as part of a
    /// 2 MiB folio if `large`; false past the chunk's pages.
    pub(crate) fn set(&self, i: usize, addr: usize, large: bool) -> bool {
        let Some(slot) = self.records.pages.get(i) else {
            return false;
        };
        slot.store(encode(self.m, addr, large), Relaxed);
        true
    }
}

#[kunit_tests(msvm_records)]
mod tests {
    use super::*;

    fn rec(mm: usize, addr: usize, large: bool) -> Option<Record> {
        Some(Record { mm, addr, large })
    }

    #[test]
    fn slots_round_trip() {
        assert_eq!(decode(0), None);
        let top = 0x00ff_ffff_ffff_f000;
        assert_eq!(decode(encode(0, top, false)), rec(0, top, false));
        assert_eq!(decode(encode(0, top, true)), rec(0, top, true));
        let v = encode(MAX_MMS - 1, 0x1000, true);
        assert_eq!(decode(v), rec(MAX_MMS - 1, 0x1000, true));
        // An unaligned address keeps only its page.
        assert_eq!(decode(encode(3, 0x2fff, false)), rec(3, 0x2000, false));
        // Index 0 at address 0 is still a record.
        assert_eq!(decode(encode(0, 0, false)), rec(0, 0, false));
    }
}
