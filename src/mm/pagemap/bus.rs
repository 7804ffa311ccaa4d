// SPDX-License-Identifier: GPL-2.0

//! A range of a device's memory BAR as a pagemap stands for it
//! ([`BusRange`]): where page `i` of the map is, both in the BAR (the
//! offset its owner's CPU side reads and writes through its `WcBar`) and
//! on the bus (the CPU physical address a peer maps). Made only by
//! `WcBar::bus_range` (its constructor, unsafe, is visible to the glue
//! alone, and `iomem.rs` is its one caller), or for a KUnit case.

use kernel::num::casts::FromSafeCast;

use super::super::page::PAGE_SIZE;

/// A page-aligned range of a device's memory BAR: its offset in the BAR
/// and its CPU physical address, one value for both, so that the two
/// sides of a page (the owner's CPU side, at the offset, and a peer's
/// device, at the address) find the same memory.
///
/// # Invariants
///
/// `phys`, `offset` and `len` are multiples of [`PAGE_SIZE`]. Made by
/// `WcBar::bus_range`: while the `WcBar` that made it lives, `[phys, phys +
/// len)` are the CPU physical addresses of bytes `[offset, offset + len)`
/// of its BAR. Made by `BusRange::kunit` (a KUnit case's): it stands for
/// no BAR, and nothing ever reaches what a mapping of its addresses maps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BusRange {
    phys: u64,
    offset: usize,
    len: usize,
}

impl BusRange {
    /// The `len` bytes at `offset` of a BAR, at CPU physical address `phys`.
    ///
    /// # Safety
    ///
    /// `phys`, `offset` and `len` are multiples of [`PAGE_SIZE`], and, while
    /// the `WcBar` the caller holds lives, `[phys, phys + len)` are the CPU
    /// physical addresses of bytes `[offset, offset + len)` of its BAR.
    pub(in crate::mm) unsafe fn new(phys: u64, offset: usize, len: usize) -> Self {
        // INVARIANT: the caller's promise.
        Self { phys, offset, len }
    }

    /// A KUnit case's range of `len` bytes at `phys`, of no BAR (offset 0).
    ///
    /// # Safety
    ///
    /// `phys` and `len` are multiples of [`PAGE_SIZE`], and nothing ever
    /// reaches the memory at those addresses through a mapping of them
    /// (a KUnit device's mappings, which no one accesses).
    #[cfg(CONFIG_KUNIT = "y")]
    pub(in crate::mm) unsafe fn kunit(phys: u64, len: usize) -> Self {
        // INVARIANT: the caller's promise.
        Self {
            phys,
            offset: 0,
            len,
        }
    }

    /// The range's offset in its BAR: page `i` of the range is at
    /// `offset() + i * PAGE_SIZE` there.
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    /// The range's length in bytes (for the glue alone: no `is_empty`
    /// goes with it, which the kernel crate's public API would ask for).
    pub(in crate::mm) fn len(&self) -> usize {
        self.len
    }

    /// The CPU physical address of page `i` of the range, if it has one.
    pub(in crate::mm) fn page_phys(&self, i: usize) -> Option<u64> {
        let off = i.checked_mul(PAGE_SIZE).filter(|&o| o < self.len)?;
        Some(self.phys + u64::from_safe_cast(off))
    }

    /// Whether the range is bytes `[offset, offset + len)` of the BAR at
    /// CPU physical address `bar_phys`, `bar_len` bytes long.
    pub(in crate::mm) fn is_in(&self, bar_phys: u64, bar_len: usize) -> bool {
        self.offset
            .checked_add(self.len)
            .is_some_and(|end| end <= bar_len)
            && bar_phys.checked_add(u64::from_safe_cast(self.offset)) == Some(self.phys)
    }
}

/// What a pagemap's pages stand for on the bus (its owner's
/// `PagemapOps::Bus`): a range of a BAR ([`BusRange`]), or nothing (`()`:
/// memory no peer reaches).
pub(crate) trait BusSide: Copy + Send + Sync + 'static {
    /// The range, if there is one.
    fn range(&self) -> Option<&BusRange>;
}

impl BusSide for () {
    fn range(&self) -> Option<&BusRange> {
        None
    }
}

impl BusSide for BusRange {
    fn range(&self) -> Option<&BusRange> {
        Some(self)
    }
}
