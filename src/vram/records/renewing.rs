// SPDX-License-Identifier: GPL-2.0

//! Records renewed where msvm meets a page (`super::super::mapped`): the
//! rule for when a record may give way to the mm that met the page, and a
//! 2 MiB folio's records kept together.

use kernel::mm::Mm;
use kernel::sync::atomic::Relaxed;
use kernel::sync::MutexGuard;

use crate::mm::page::PAGE_SIZE;

use super::{decode, encode, Records, Table};

impl Records {
    /// A way to renew the records of pages of `mm` met under a walk's
    /// sequence ([`Renewing::renew`]), the table locked while it lives;
    /// looks for `mm` at index `hint` first, and adds it only when a
    /// record takes it. Allocates only `GFP_NOWAIT`, so it may be had
    /// under a mirror's lock: a page whose table had no room then keeps
    /// its record (a later walk tries again).
    pub(crate) fn renewing<'a>(&'a self, mm: &'a Mm, hint: Option<usize>) -> Renewing<'a> {
        let t = self.table.lock();
        let m = t.find(mm, hint);
        Renewing {
            records: self,
            mm,
            m,
            failed: false,
            table: t,
        }
    }
}

/// Records being renewed for one mm ([`Records::renewing`]), the table
/// locked while it lives.
pub(crate) struct Renewing<'a> {
    records: &'a Records,
    mm: &'a Mm,
    /// The mm's index in the table, once it has one (an mm is added only
    /// when a record takes it).
    m: Option<usize>,
    /// Adding the mm failed (no memory): not tried again.
    failed: bool,
    table: MutexGuard<'a, Table>,
}

impl Renewing<'_> {
    /// Whether the record `old` of a page this mm maps may give way to one
    /// of this mm: it leads nowhere that still maps pages (none, another
    /// address of this mm after an `mremap`, an mm with no users: a fork
    /// parent gone), or the page is mapped by no other mm (`shared` false:
    /// the recorded mm unmapped it). A record of another mm that lives
    /// stays while the page may be shared with it (a fork relative, whose
    /// mapping leads to it as well: a child meeting its parent's pages and
    /// exiting must not leave them recorded in its dead mm).
    fn may_replace(&self, old: usize, shared: impl FnOnce() -> bool) -> bool {
        let Some(r) = decode(old) else {
            return true;
        };
        if Some(r.mm) == self.m || !shared() {
            return true;
        }
        let recorded = self.table.mms.get(r.mm).and_then(Option::as_ref);
        !recorded.is_some_and(|mm| crate::mm::mmap::has_users(mm))
    }

    /// The mm's index, added to the table if it has none (`GFP_NOWAIT`;
    /// tried once).
    fn index(&mut self) -> Option<usize> {
        if self.m.is_none() && !self.failed {
            self.m = self.records.mm_index(&mut self.table, self.mm, None).ok();
            self.failed = self.m.is_none();
        }
        self.m
    }

    /// Whether page `i`'s record names the mm.
    pub(crate) fn names(&self, i: usize) -> bool {
        self.m.is_some() && self.records.get(i).map(|r| r.mm) == self.m
    }

    /// Small page `i` is mapped at `addr` of the mm, as a walk found it
    /// under a sequence still valid (so the page stays in use, and no
    /// `folio_free` clears its slot meanwhile); `shared` tells whether
    /// another mm may map it too (asked only if needed). Records it there
    /// if its record may give way ([`Renewing::may_replace`]). Returns
    /// whether the record changed.
    pub(crate) fn renew(&mut self, i: usize, addr: usize, shared: impl FnOnce() -> bool) -> bool {
        self.renew_page(i, addr, false, shared)
    }

    /// [`Renewing::renew`] of page `i`, part of a 2 MiB folio if `large`.
    fn renew_page(
        &mut self,
        i: usize,
        addr: usize,
        large: bool,
        shared: impl FnOnce() -> bool,
    ) -> bool {
        let Some(slot) = self.records.pages.get(i) else {
            return false;
        };
        let old = slot.load(Relaxed);
        if self.m.is_some_and(|m| old == encode(m, addr, large)) {
            return false;
        }
        if !self.may_replace(old, shared) {
            return false;
        }
        let Some(m) = self.index() else {
            return false;
        };
        slot.store(encode(m, addr, large), Relaxed);
        true
    }

    /// Page `i` of the 2 MiB folio of pages `head..head + nr` is mapped at
    /// `addr` of the mm, as [`Renewing::renew`] says; the folio mapped
    /// whole (one PMD) if `whole`. A folio's records go together, decided
    /// once by its head's record: a device's teardown moves its pages in
    /// one step, grouped by record. Whole, every page is recorded at the
    /// address page `i`'s gives; mapped by page-table entries (part of it
    /// moved by `mremap`, say), page `i` at `addr`, and the others only
    /// when they name another mm (at the address page `i`'s gives: a
    /// hint). Returns how many records changed.
    pub(crate) fn renew_folio(
        &mut self,
        (head, nr): (usize, usize),
        (i, addr): (usize, usize),
        whole: bool,
        shared: impl FnOnce() -> bool,
    ) -> u64 {
        let Some(h) = self.records.pages.get(head) else {
            return 0;
        };
        let old = h.load(Relaxed);
        let at = addr.wrapping_sub((i - head) * PAGE_SIZE);
        let ours = self.m.is_some() && decode(old).map(|r| r.mm) == self.m;
        if ours && whole && old == encode(self.m.unwrap_or(0), at, true) {
            return 0;
        }
        if ours && !whole {
            // Only the met page's address may be new (its record stays one
            // of the folio's: a teardown groups a folio's pages by it).
            return u64::from(self.renew_page(i, addr, true, || true));
        }
        if !ours && !self.may_replace(old, shared) {
            return 0;
        }
        let Some(m) = self.index() else {
            return 0;
        };
        let mut changed = 0;
        for j in head..head + nr {
            let Some(slot) = self.records.pages.get(j) else {
                break;
            };
            let cur = slot.load(Relaxed);
            let v = if j == i {
                encode(m, addr, true)
            } else if whole || !ours {
                encode(m, at.wrapping_add((j - head) * PAGE_SIZE), true)
            } else {
                continue;
            };
            if cur != v {
                slot.store(v, Relaxed);
                changed += 1;
            }
        }
        changed
    }
}
