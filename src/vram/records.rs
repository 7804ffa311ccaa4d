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
//! A record is renewed wherever msvm meets a device page mapped at an
//! address of an mm under a walk's valid sequence (a job's walk, the fault
//! handler's, RESIDENCY's: [`Renewing`], `mapped.rs`) or puts it back
//! there (a CPU fault's window restoring a neighbour), if the record leads
//! nowhere any more: a page `mremap` moved, or that only a fork child maps
//! once its parent unmapped it or exited, is recorded anew the next time
//! its process meets it, and eviction moves it through that mapping
//! again. A record naming a live mm that may share the page stays
//! ([`Renewing::may_replace`]); a 2 MiB folio's records go together.
//!
//! A table holds as many mms as its chunk has pages, plus one (up to
//! [`MAX_MMS`]): each page names one mm at most, so an mm that needs a
//! record always finds an entry that no page names, and every page of a
//! chunk can be recorded, whatever the number of processes.
//!
//! # Lock order
//!
//! [`Records::table`] is a leaf mutex: taken with nothing of the pool
//! held but, at most, `shrink_lock`, `VramPool::chunks` (a teardown
//! reading its 2 MiB folios' records), an mmap lock and a mirror's lock (a
//! renewal, under a walk's sequence; a mirror's lock is taken in
//! invalidations, from reclaim). So nothing allocates under it but
//! `GFP_NOWAIT` (the table's growth; a migration that needs more grows it
//! with the lock let go, [`Records::noting`]), and an mm it lets go of is
//! dropped under it (`mmdrop`, process context, which allocates nothing).
//! The page slots are atomics, also cleared by `folio_free` in any
//! context.
//!
//! A table keeps up to [`KEPT_MMS`] mms that no page names any more (their
//! `mm_struct`s, not their memory), or as many as it has named ones past
//! that, until a new mm needs the room or the chunk's pagemap goes.

use kernel::mm::Mm;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::aref::ARef;
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::sync::{Mutex, MutexGuard};

use crate::mm::page::PAGE_SIZE;

mod renewing;
pub(crate) use renewing::Renewing;

/// The bits of a page's offset.
const PAGE_SHIFT: u32 = PAGE_SIZE.trailing_zeros();

/// The bits of a page slot that hold its address's page number: user
/// addresses lie below 2^56 (with five-level paging too).
const ADDR_BITS: u32 = 56 - PAGE_SHIFT;

/// The bits of a page slot, below its address, that hold its mm's index
/// plus one.
const MM_BITS: u32 = usize::BITS - 1 - ADDR_BITS;

/// The most mms a table may name (index plus one fits in [`MM_BITS`]).
const MAX_MMS: usize = (1 << MM_BITS) - 1;

/// The mms a chunk keeps before it lets go of those no page names any more.
const KEPT_MMS: usize = 16;

/// The bit of a page slot that says the page was migrated in as part of a
/// 2 MiB folio (or is part of one now, when renewed).
const LARGE: usize = 1 << (usize::BITS - 1);

/// A page slot: its address's page number, above its mm's index in
/// [`Table::mms`] plus one, and [`LARGE`] for a page of a 2 MiB folio; 0
/// for no record. An address at or above 2^56 (no user address) keeps
/// only its low bits.
fn encode(mm: usize, addr: usize, large: bool) -> usize {
    let page = (addr >> PAGE_SHIFT) & ((1 << ADDR_BITS) - 1);
    (page << MM_BITS) | ((mm + 1) & MAX_MMS) | if large { LARGE } else { 0 }
}

/// What a page slot records, if anything.
fn decode(v: usize) -> Option<Record> {
    let mm = v & MAX_MMS;
    (mm != 0).then(|| Record {
        mm: mm - 1,
        addr: ((v & !LARGE) >> MM_BITS) << PAGE_SHIFT,
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

/// The mms a chunk's page slots name, by index, and the scratch to find
/// those no slot names any more.
struct Table {
    /// An entry no slot names any more is reused ([`Records::mm_index`]).
    mms: KVVec<Option<ARef<Mm>>>,
    /// One bit per entry the table may have: which ones a slot names
    /// ([`Records::forget_unnamed`]), made when the chunk is, so that
    /// nothing under the lock allocates for it.
    named: KVVec<u64>,
    /// The length at which the table looks for entries to let go next:
    /// twice the entries named at the last look (at least [`KEPT_MMS`]),
    /// so that a table of many mms is not scanned for each new one.
    scan_at: usize,
}

impl Table {
    /// The index of `mm`, looked for at `hint` first, if it has one.
    fn find(&self, mm: &Mm, hint: Option<usize>) -> Option<usize> {
        let is = |m: &Option<ARef<Mm>>| m.as_ref().is_some_and(|m| core::ptr::eq(&**m, mm));
        hint.filter(|&i| self.mms.get(i).is_some_and(is))
            .or_else(|| self.mms.iter().position(is))
    }
}

/// Why [`Records::mm_index`] found no entry for an mm.
enum NoIndex {
    /// The table must grow to this capacity first, which it could not do
    /// without waiting for memory.
    Grow(usize),
    /// No entry can be had: the table is at its limit with every entry
    /// named (a chunk larger than [`MAX_MMS`] pages), or it had no memory.
    None,
}

/// The records of one chunk's pages.
#[pin_data]
pub(crate) struct Records {
    /// One slot per page (see [`encode`]).
    pages: KVVec<Atomic<usize>>,
    /// The most entries the table takes: one more than the pages, so that
    /// one is always free to reuse.
    limit: usize,
    #[pin]
    table: Mutex<Table>,
}

impl Records {
    /// Records for `npages` pages, none yet.
    pub(crate) fn new(npages: usize) -> impl PinInit<Self, Error> {
        let limit = (npages + 1).min(MAX_MMS);
        try_pin_init!(Self {
            pages: {
                let mut v = KVVec::with_capacity(npages, GFP_KERNEL)?;
                for _ in 0..npages {
                    v.push(Atomic::new(0), GFP_KERNEL)?;
                }
                v
            },
            limit,
            table <- new_mutex!(Table {
                mms: KVVec::new(),
                named: KVVec::from_elem(0, limit.div_ceil(64), GFP_KERNEL)?,
                scan_at: KEPT_MMS,
            }),
        }? Error)
    }

    /// The index of `mm` in the table (looked for at `hint` first), added
    /// if it is not there. Past [`KEPT_MMS`] entries, and each time the
    /// table doubles after, the mms no page names any more are let go
    /// first, so that a chunk that outlives many processes keeps at most
    /// about as many `mm_struct`s as its pages name. Allocates only
    /// `GFP_NOWAIT` (see the lock order).
    fn mm_index(&self, t: &mut Table, mm: &Mm, hint: Option<usize>) -> Result<usize, NoIndex> {
        if let Some(i) = t.find(mm, hint) {
            return Ok(i);
        }
        let full = !t.mms.iter().any(Option::is_none);
        if full && (t.mms.len() >= t.scan_at || t.mms.len() >= self.limit) {
            let named = self.forget_unnamed(t);
            t.scan_at = (2 * named).max(KEPT_MMS);
        }
        if let Some(i) = t.mms.iter().position(Option::is_none) {
            t.mms[i] = Some(ARef::from(mm));
            return Ok(i);
        }
        if t.mms.len() >= self.limit {
            return Err(NoIndex::None);
        }
        if t.mms.len() == t.mms.capacity() {
            let want = (t.mms.len() * 2).max(KEPT_MMS).min(self.limit);
            if t.mms
                .reserve(want - t.mms.len(), GFP_NOWAIT | __GFP_NOWARN)
                .is_err()
            {
                return Err(NoIndex::Grow(want));
            }
        }
        t.mms
            .push_within_capacity(Some(ARef::from(mm)))
            .map_err(|_| NoIndex::None)?;
        Ok(t.mms.len() - 1)
    }

    /// Lets go of the mms of the table that no page slot names (slots
    /// cleared by `folio_free` only ever stop naming one; new ones are
    /// written under the lock that `t` is borrowed from). Returns how many
    /// it keeps.
    fn forget_unnamed(&self, t: &mut Table) -> usize {
        t.named.iter_mut().for_each(|w| *w = 0);
        for v in self.pages.iter() {
            if let Some(r) = decode(v.load(Relaxed)) {
                if let Some(w) = t.named.get_mut(r.mm / 64) {
                    *w |= 1 << (r.mm % 64);
                }
            }
        }
        for (i, m) in t.mms.iter_mut().enumerate() {
            let named = t
                .named
                .get(i / 64)
                .is_some_and(|w| w & (1 << (i % 64)) != 0);
            if !named {
                *m = None;
            }
        }
        t.mms.iter().filter(|m| m.is_some()).count()
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
    /// if the table has no room for `mm`, or no memory. May wait for
    /// memory (with the table unlocked): not under a mirror's lock.
    pub(crate) fn noting(&self, mm: &Mm) -> Option<Noting<'_>> {
        for _ in 0..2 {
            let mut t = self.table.lock();
            match self.mm_index(&mut t, mm, None) {
                Ok(m) => {
                    return Some(Noting {
                        records: self,
                        m,
                        _table: t,
                    })
                }
                Err(NoIndex::Grow(want)) => {
                    drop(t);
                    self.grow(want)?;
                }
                Err(NoIndex::None) => return None,
            }
        }
        None
    }

    /// Gives the table room for `want` entries, allocated with the lock
    /// let go; `None` on want of memory.
    fn grow(&self, want: usize) -> Option<()> {
        let mut v = KVVec::with_capacity(want, GFP_KERNEL).ok()?;
        let mut t = self.table.lock();
        // Only into a vector that takes every entry, in order (their
        // indices are what the slots name).
        if t.mms.capacity() < want && t.mms.len() <= v.capacity() {
            for m in t.mms.drain_all() {
                // Cannot fail: checked above.
                let _ = v.push_within_capacity(m);
            }
            core::mem::swap(&mut t.mms, &mut v);
        }
        drop(t);
        // The old (empty) vector is freed with the lock let go.
        drop(v);
        Some(())
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
            .table
            .lock()
            .mms
            .iter()
            .position(|x| x.as_ref().is_some_and(|x| x.as_raw() as usize == mm));
        let Some(m) = m else { return 0 };
        self.pages
            .iter()
            .filter(|s| decode(s.load(Relaxed)).is_some_and(|r| r.mm == m))
            .count()
    }

    /// The mm and address page `i` is recorded at if its record says a
    /// 2 MiB folio (`i` is the head of a block out whole, say): where the
    /// folio was migrated in, or met since.
    pub(crate) fn large_at(&self, i: usize) -> Option<(ARef<Mm>, usize)> {
        // The slot read under the table's lock, which a renewal holds.
        let t = self.table.lock();
        let r = self.get(i).filter(|r| r.large)?;
        Some((t.mms.get(r.mm)?.clone()?, r.addr))
    }

    /// The mm at index `m` of the table, held by its count of references
    /// (not its users: see `Mm::mmget_not_zero`).
    pub(crate) fn mm_at(&self, m: usize) -> Option<ARef<Mm>> {
        self.table.lock().mms.get(m)?.clone()
    }
}

/// Records being written for one mm ([`Records::noting`]).
pub(crate) struct Noting<'a> {
    records: &'a Records,
    /// The mm's index in the table.
    m: usize,
    /// The table, locked.
    _table: MutexGuard<'a, Table>,
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
        // The last user page of a five-level address space.
        let last = (1 << 56) - PAGE_SIZE;
        assert_eq!(
            decode(encode(MAX_MMS - 1, last, true)),
            rec(MAX_MMS - 1, last, true)
        );
    }

    /// Every page of a chunk can name an mm of its own: more than the 4,095
    /// mms a table took before (the page of the 4,096th process got no
    /// record, and eviction never moved it). A page freed and used by a
    /// new mm reuses the entry no page names any more. A renewal moves a
    /// record to another address of its mm, or to another mm only where
    /// the old one leads nowhere; a 2 MiB folio's records go together.
    #[test]
    fn every_page_can_name_an_mm_of_its_own() -> Result {
        use crate::mm::kunit_mm::{check, fresh_mm};
        const N: usize = 4100;
        let records = KBox::pin_init(Records::new(N), GFP_KERNEL)?;
        let mut mms = KVec::with_capacity(N, GFP_KERNEL)?;
        for i in 0..N {
            let mm = fresh_mm()?;
            check(records.note(i, 1, &mm, (i + 1) * PAGE_SIZE, false) == 1)?;
            mms.push(mm, GFP_KERNEL)?;
        }
        for (i, mm) in mms.iter().enumerate() {
            let r = records.get(i).ok_or(EINVAL)?;
            check(r.addr == (i + 1) * PAGE_SIZE)?;
            let named = records.mm_at(r.mm).ok_or(EINVAL)?;
            check(core::ptr::eq(&*named, &***mm))?;
        }
        // Pages 0 and 3 freed and used by new mms: the table takes one
        // entry more than the pages, then reuses one that no page names
        // any more.
        let mut late = KVec::with_capacity(2, GFP_KERNEL)?;
        for i in [0, 3] {
            records.forget(i, 1);
            let mm = fresh_mm()?;
            check(records.note(i, 1, &mm, PAGE_SIZE, false) == 1)?;
            let r = records.get(i).ok_or(EINVAL)?;
            check(
                records
                    .mm_at(r.mm)
                    .is_some_and(|m| core::ptr::eq(&*m, &**mm)),
            )?;
            late.push(mm, GFP_KERNEL)?;
        }
        check(records.table.lock().mms.len() == N + 1)?;
        // Page 1 met by mm 2 (a fork relative, say): its record stays while
        // mm 1 has users and may share it; met by mm 1 at another address
        // (`mremap`), it moves there, once.
        let m2 = records.get(2).ok_or(EINVAL)?.mm;
        check(
            !records
                .renewing(&mms[2], Some(m2))
                .renew(1, 0x4000_0000, || true),
        )?;
        let mut renewing = records.renewing(&mms[1], None);
        check(renewing.renew(1, 0x4000_0000, || true))?;
        check(!renewing.renew(1, 0x4000_0000, || true))?;
        drop(renewing);
        check(records.get(1).is_some_and(|r| r.addr == 0x4000_0000))?;
        // Page 4, its mm alive, met by mm 5 alone (mm 4 unmapped it).
        check(
            records
                .renewing(&mms[5], None)
                .renew(4, 0x4800_0000, || false),
        )?;
        check(records.get(4).is_some_and(|r| r.addr == 0x4800_0000))?;
        // Mm 1's last user gone (a fork parent that exited): mm 2 (now
        // `mms[1]`) takes page 1, shared or not.
        let one = mms.remove(1).map_err(|_| EINVAL)?;
        drop(one);
        check(
            records
                .renewing(&mms[1], Some(m2))
                .renew(1, 0x5000_0000, || true),
        )?;
        let r = records.get(1).ok_or(EINVAL)?;
        check(r.addr == 0x5000_0000 && r.mm == m2)?;
        // A 2 MiB folio (pages 1024..1536) met whole through page 1030 by
        // an mm alone: every record goes to it, at the addresses page
        // 1030's gives, once; met again through one page mapped elsewhere
        // (a partial `mremap`), only that page's record moves.
        let mut renewing = records.renewing(&mms[7], None);
        let at = 0x6000_0000;
        let met = (1030, at + 6 * PAGE_SIZE);
        check(renewing.renew_folio((1024, 512), met, true, || false) == 512)?;
        check(renewing.renew_folio((1024, 512), met, true, || false) == 0)?;
        check(renewing.renew_folio((1024, 512), (1030, 0x7000_0000), false, || true) == 1)?;
        drop(renewing);
        let (head, last) = (
            records.get(1024).ok_or(EINVAL)?,
            records.get(1535).ok_or(EINVAL)?,
        );
        check(head.large && head.addr == at && head.mm == last.mm)?;
        check(last.addr == at + 511 * PAGE_SIZE)?;
        check(
            records
                .get(1030)
                .is_some_and(|r| r.addr == 0x7000_0000 && r.large),
        )?;
        check(records.large_at(1024).is_some_and(|(_, a)| a == at))?;
        // Its head met through a page-table entry: still a folio's record.
        let mut renewing = records.renewing(&mms[7], None);
        check(renewing.renew_folio((1024, 512), (1024, 0x7100_0000), false, || true) == 1)?;
        drop(renewing);
        check(
            records
                .large_at(1024)
                .is_some_and(|(_, a)| a == 0x7100_0000),
        )?;
        Ok(())
    }
}
