// SPDX-License-Identifier: GPL-2.0

//! The emulated device's TLB: the translations of the pages its engine
//! used last, for one VM.
//!
//! A GPU caches the page-table entries it walks. Whoever zaps entries
//! must invalidate the TLB too before what they mapped is freed or reused:
//! Xe zaps the PTEs, then sends the GuC a TLB invalidation and waits for
//! it (`xe_svm_invalidate`); UVM batches them (`uvm_tlb_batch`). The
//! emulated device keeps a small direct-mapped TLB per device page table
//! (`super::devpt::DevPt`), which looks it up before its leaves and
//! invalidates it wherever an entry changes or goes: a translation in it
//! is always the table's entry. Its counts show how often the engine's
//! lookups found a translation there.

use core::cell::Cell;
use kernel::prelude::*;

/// Translations one TLB holds.
pub(crate) const ENTRIES: usize = 32;

/// A direct-mapped TLB of [`ENTRIES`] translations of type `T`, keyed by
/// page number.
///
/// Lookups take `&self`, as the engine reads the table that holds the TLB
/// through a shared borrow; `Cell` keeps it to one thread at a time (the
/// table's lock).
pub(crate) struct Tlb<T: Copy> {
    /// Each slot's page number plus one (0: empty), and its translation.
    slots: [Cell<(usize, T)>; ENTRIES],
    hits: Cell<u64>,
    misses: Cell<u64>,
}

impl<T: Copy + Default> Tlb<T> {
    /// An empty TLB.
    pub(crate) fn new() -> Self {
        Self {
            slots: core::array::from_fn(|_| Cell::new((0, T::default()))),
            hits: Cell::new(0),
            misses: Cell::new(0),
        }
    }

    /// The translation of page `vpn`: the TLB's, else what `walk` finds,
    /// kept if there is one.
    pub(crate) fn lookup(&self, vpn: usize, walk: impl FnOnce() -> Option<T>) -> Option<T> {
        let slot = &self.slots[vpn % ENTRIES];
        let (tag, t) = slot.get();
        if tag == vpn.wrapping_add(1) {
            self.hits.set(self.hits.get() + 1);
            return Some(t);
        }
        self.misses.set(self.misses.get() + 1);
        let t = walk()?;
        slot.set((vpn.wrapping_add(1), t));
        Some(t)
    }

    /// Drops the translations of pages `[first, end)`; returns how many
    /// it held.
    pub(crate) fn invalidate(&mut self, first: usize, end: usize) -> usize {
        let mut dropped = 0;
        let mut drop_if = |slot: &mut Cell<(usize, T)>, hit: &dyn Fn(usize) -> bool| {
            let tag = slot.get_mut().0;
            if tag != 0 && hit(tag - 1) {
                *slot.get_mut() = (0, T::default());
                dropped += 1;
            }
        };
        if end.saturating_sub(first) < ENTRIES {
            // A short range: only its pages' slots.
            for vpn in first..end {
                drop_if(&mut self.slots[vpn % ENTRIES], &|v| v == vpn);
            }
        } else {
            for slot in &mut self.slots {
                drop_if(slot, &|v| (first..end).contains(&v));
            }
        }
        dropped
    }

    /// The lookups that hit and missed since the last call.
    pub(crate) fn take_counts(&self) -> (u64, u64) {
        (self.hits.replace(0), self.misses.replace(0))
    }
}

#[kunit_tests(msvm_tlb)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_the_walk_found_until_invalidated() {
        let mut tlb = Tlb::<u64>::new();
        let mut walks = 0;
        let mut walk = |v: u64| {
            walks += 1;
            Some(v)
        };
        assert_eq!(tlb.lookup(7, || walk(70)), Some(70));
        // A hit: the walk is not asked (it would say otherwise).
        assert_eq!(tlb.lookup(7, || walk(71)), Some(70));
        // A page that maps to the same slot replaces it.
        assert_eq!(tlb.lookup(7 + ENTRIES, || walk(80)), Some(80));
        assert_eq!(tlb.lookup(7, || walk(72)), Some(72));
        assert_eq!(walks, 3);
        assert_eq!(tlb.take_counts(), (1, 3));
        assert_eq!(tlb.take_counts(), (0, 0));
        // Nothing found: nothing kept.
        assert_eq!(tlb.lookup(9, || None), None);
        assert_eq!(tlb.lookup(9, || Some(90)), Some(90));
        // An invalidation drops its range only.
        assert_eq!(tlb.invalidate(8, 10), 1);
        assert_eq!(tlb.lookup(9, || Some(91)), Some(91));
        assert_eq!(tlb.lookup(7, || Some(0)), Some(72));
        assert_eq!(tlb.invalidate(0, usize::MAX), 2);
        assert_eq!(tlb.lookup(7, || None), None);
    }

    #[test]
    fn page_zero_and_the_last_page_are_kept_too() {
        let mut tlb = Tlb::<u64>::new();
        assert_eq!(tlb.lookup(0, || Some(1)), Some(1));
        assert_eq!(tlb.lookup(0, || None), Some(1));
        let last = usize::MAX / 4096;
        assert_eq!(tlb.lookup(last, || Some(2)), Some(2));
        assert_eq!(tlb.lookup(last, || None), Some(2));
        assert_eq!(tlb.invalidate(0, 1), 1);
        assert_eq!(tlb.lookup(0, || None), None);
    }
}
