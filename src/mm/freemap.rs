// SPDX-License-Identifier: GPL-2.0

//! The free pages of one chunk of device memory: a bitmap, and a count per
//! 2 MiB block, so that a whole free block can be handed out as one large
//! folio and small allocations fill partly used blocks before they break
//! whole free ones.
//!
//! Allocates only when it is created: freeing (from `folio_free`, in any
//! context) and allocating never allocate memory.

use kernel::num::casts::{u32_as_usize, FromSafeCast};
use kernel::prelude::*;

use super::page::BLOCK_PAGES;

const WORD: usize = u32_as_usize(u64::BITS);

/// The free pages of a chunk.
///
/// # Invariants
///
/// - bit `i` of `bits` is set iff page `i < npages` is free; bits past
///   `npages` are clear;
/// - `block_free[b]` is the number of set bits of block `b`, `nfree` their
///   sum;
/// - `nfree_blocks` counts the full-length blocks with every page free;
/// - `whole[b]` is set iff block `b` was handed out by [`FreeMap::take_block`]
///   and neither did any of its pages come back since nor was it split
///   ([`FreeMap::split`]); `nwhole` counts them;
/// - `reserved[b]` is set only if `whole[b]` is clear, and then neither
///   [`FreeMap::take`] nor [`FreeMap::take_block`] hands out pages of block
///   `b`.
pub(crate) struct FreeMap {
    bits: KVec<u64>,
    block_free: KVec<u16>,
    whole: KVec<bool>,
    reserved: KVec<bool>,
    npages: usize,
    nfree: usize,
    nfree_blocks: usize,
    nwhole: usize,
}

impl FreeMap {
    /// A map of `npages` pages, all free (`EINVAL` past `u32` indices).
    pub(crate) fn new(npages: usize) -> Result<Self> {
        if u32::try_from(npages).is_err() {
            return Err(EINVAL);
        }
        let nwords = npages.div_ceil(WORD);
        let nblocks = npages.div_ceil(BLOCK_PAGES);
        let mut bits = KVec::with_capacity(nwords, GFP_KERNEL)?;
        for w in 0..nwords {
            let left = npages - w * WORD;
            let word = if left >= WORD {
                u64::MAX
            } else {
                (1u64 << left) - 1
            };
            bits.push(word, GFP_KERNEL)?;
        }
        let mut block_free = KVec::with_capacity(nblocks, GFP_KERNEL)?;
        let mut whole = KVec::with_capacity(nblocks, GFP_KERNEL)?;
        let mut reserved = KVec::with_capacity(nblocks, GFP_KERNEL)?;
        for b in 0..nblocks {
            // CAST: at most `BLOCK_PAGES` (512), which fits in `u16`.
            block_free.push(block_len(npages, b) as u16, GFP_KERNEL)?;
            whole.push(false, GFP_KERNEL)?;
            reserved.push(false, GFP_KERNEL)?;
        }
        // INVARIANT: bits `0..npages` set and no others; each block's count
        // is its length, all set; `nfree_blocks` counts the full-length
        // blocks (all free); no block is out whole or reserved.
        Ok(Self {
            bits,
            block_free,
            whole,
            reserved,
            npages,
            nfree: npages,
            nfree_blocks: npages / BLOCK_PAGES,
            nwhole: 0,
        })
    }

    /// Free pages.
    pub(crate) fn nfree(&self) -> usize {
        self.nfree
    }

    /// Whole free blocks: large folios that can be handed out.
    pub(crate) fn nfree_blocks(&self) -> usize {
        self.nfree_blocks
    }

    /// Blocks out as large folios that are still whole.
    pub(crate) fn nwhole(&self) -> usize {
        self.nwhole
    }

    /// Free pages of 2 MiB block `b` (0 past the map).
    pub(crate) fn block_free(&self, b: usize) -> usize {
        self.block_free.get(b).map_or(0, |&n| usize::from(n))
    }

    /// Whether page `i` is free (a page past the map is not).
    pub(crate) fn is_free(&self, i: usize) -> bool {
        i < self.npages && self.bits[i / WORD] & (1u64 << (i % WORD)) != 0
    }

    /// Whether block `b` is out whole, as one large folio.
    pub(crate) fn is_whole(&self, b: usize) -> bool {
        self.whole.get(b).is_some_and(|&w| w)
    }

    /// Reserves block `b`: no page of it is handed out until
    /// [`FreeMap::release`]. Refused (`false`) for a block out whole as one
    /// large folio, one reserved already, or one past the map.
    pub(crate) fn reserve(&mut self, b: usize) -> bool {
        match (self.whole.get(b), self.reserved.get_mut(b)) {
            (Some(false), Some(r)) if !*r => {
                // INVARIANT: the block is not out whole.
                *r = true;
                true
            }
            _ => false,
        }
    }

    /// Hands out pages of block `b` again.
    pub(crate) fn release(&mut self, b: usize) {
        if let Some(r) = self.reserved.get_mut(b) {
            *r = false;
        }
    }

    /// Takes up to `want` free pages, pushing their indices to `out` (until
    /// it is full): partly used blocks first, whole free blocks last, lowest
    /// indices first within a block, reserved blocks never. Returns how many
    /// it took.
    pub(crate) fn take(&mut self, want: usize, out: &mut KVec<u32>) -> usize {
        let mut taken = 0;
        for whole_free in [false, true] {
            for b in 0..self.block_free.len() {
                let f = usize::from(self.block_free[b]);
                // Short last blocks count as partly used: they never make
                // a large folio.
                if f == 0 || (f == BLOCK_PAGES) != whole_free || self.reserved[b] {
                    continue;
                }
                let first = b * BLOCK_PAGES;
                for w in first / WORD..(first + block_len(self.npages, b)).div_ceil(WORD) {
                    while self.bits[w] != 0 {
                        if taken == want {
                            return taken;
                        }
                        let bit = usize::from_safe_cast(self.bits[w].trailing_zeros());
                        // CAST: a page index, below `npages`, which fits in `u32` (`new`).
                        if out.push_within_capacity((w * WORD + bit) as u32).is_err() {
                            return taken;
                        }
                        // INVARIANT: the page leaves the bitmap, its block's
                        // count and `nfree`; a whole free block broken
                        // leaves `nfree_blocks`. `whole[b]` is clear: its
                        // block had free pages.
                        self.bits[w] &= !(1u64 << bit);
                        if usize::from(self.block_free[b]) == BLOCK_PAGES {
                            // A whole free block broken.
                            self.nfree_blocks -= 1;
                        }
                        self.block_free[b] -= 1;
                        self.nfree -= 1;
                        taken += 1;
                    }
                }
            }
        }
        taken
    }

    /// Takes a whole free block that is not reserved, if there is one: the
    /// index of its first page.
    pub(crate) fn take_block(&mut self) -> Option<usize> {
        let b = (0..self.block_free.len()).find(|&b| {
            block_len(self.npages, b) == BLOCK_PAGES
                && usize::from(self.block_free[b]) == BLOCK_PAGES
                && !self.reserved[b]
        })?;
        let first = b * BLOCK_PAGES;
        // INVARIANT: the whole full-length block leaves the bitmap, its
        // count, `nfree` and `nfree_blocks`, and is out whole (`whole`,
        // `nwhole`); it was not reserved.
        for w in self.bits[first / WORD..(first + BLOCK_PAGES) / WORD].iter_mut() {
            *w = 0;
        }
        self.block_free[b] = 0;
        self.nfree -= BLOCK_PAGES;
        self.nfree_blocks -= 1;
        self.whole[b] = true;
        self.nwhole += 1;
        Some(first)
    }

    /// The large folio handed out at block `first` was split into smaller
    /// folios: the block no longer holds a whole large folio.
    pub(crate) fn split(&mut self, first: usize) {
        let b = first / BLOCK_PAGES;
        if b < self.whole.len() && self.whole[b] {
            // INVARIANT: split: the block no longer holds a folio handed
            // out whole.
            self.whole[b] = false;
            self.nwhole -= 1;
        }
    }

    /// Pages `first..first + count` are free again; pages out of range or
    /// already free are ignored. Returns how many were freed.
    pub(crate) fn put(&mut self, first: usize, count: usize) -> usize {
        let mut freed = 0;
        for i in first..first.saturating_add(count).min(self.npages) {
            let (w, bit) = (i / WORD, 1u64 << (i % WORD));
            if self.bits[w] & bit != 0 {
                continue;
            }
            // INVARIANT: the page comes back to the bitmap and its block's
            // count (and to `nfree` below); a block now all free and
            // full-length to `nfree_blocks`; its block is no longer whole.
            self.bits[w] |= bit;
            let b = i / BLOCK_PAGES;
            self.block_free[b] += 1;
            if usize::from(self.block_free[b]) == BLOCK_PAGES {
                self.nfree_blocks += 1;
            }
            if self.whole[b] {
                self.whole[b] = false;
                self.nwhole -= 1;
            }
            freed += 1;
        }
        self.nfree += freed;
        freed
    }
}

/// Pages of block `b` of a map of `npages` pages (the last may be short).
fn block_len(npages: usize, b: usize) -> usize {
    (npages - b * BLOCK_PAGES).min(BLOCK_PAGES)
}

#[kunit_tests(msvm_freemap)]
mod tests {
    use super::*;

    #[test]
    fn small_pages_fill_used_blocks_first() -> Result {
        let mut m = FreeMap::new(3 * BLOCK_PAGES)?;
        let mut out = KVec::with_capacity(4 * BLOCK_PAGES, GFP_KERNEL)?;
        // Taking nothing breaks nothing.
        assert_eq!(m.take(0, &mut out), 0);
        assert_eq!(m.nfree_blocks(), 3);
        // Break block 1 only.
        assert_eq!(m.take_block(), Some(0));
        assert_eq!(m.take(1, &mut out), 1);
        assert_eq!(out[0] as usize, BLOCK_PAGES);
        // Block 0 comes back half: it is partly used, so it goes first.
        assert_eq!(m.put(0, BLOCK_PAGES / 2), BLOCK_PAGES / 2);
        assert_eq!(m.nwhole(), 0);
        out.clear();
        assert_eq!(m.take(BLOCK_PAGES / 2, &mut out), BLOCK_PAGES / 2);
        assert!(out.iter().all(|&i| (i as usize) < BLOCK_PAGES));
        // Block 2 is still whole.
        assert_eq!(m.nfree_blocks(), 1);
        assert_eq!(m.take_block(), Some(2 * BLOCK_PAGES));
        assert_eq!(m.nfree(), BLOCK_PAGES - 1);
        assert_eq!(m.nfree_blocks(), 0);
        Ok(())
    }

    #[test]
    fn reserved_blocks_are_not_handed_out() -> Result {
        let mut m = FreeMap::new(3 * BLOCK_PAGES)?;
        let mut out = KVec::with_capacity(3 * BLOCK_PAGES, GFP_KERNEL)?;
        // Block 0 out whole: it cannot be reserved.
        assert_eq!(m.take_block(), Some(0));
        assert!(!m.reserve(0));
        // Block 1 partly used and reserved: small pages come from block 2.
        assert_eq!(m.take(1, &mut out), 1);
        assert_eq!(out[0] as usize, BLOCK_PAGES);
        assert!(m.reserve(1));
        assert!(!m.reserve(1));
        assert!(!m.reserve(9));
        out.clear();
        assert_eq!(m.take(10, &mut out), 10);
        assert!(out.iter().all(|&i| i as usize >= 2 * BLOCK_PAGES));
        // Block 1 all free again, still reserved: not handed out whole.
        assert_eq!(m.put(BLOCK_PAGES, 1), 1);
        assert_eq!(m.take_block(), None);
        m.release(1);
        assert_eq!(m.take_block(), Some(BLOCK_PAGES));
        Ok(())
    }

    #[test]
    fn blocks_and_counts() -> Result {
        // A short last block is never handed out whole.
        let mut m = FreeMap::new(BLOCK_PAGES + 100)?;
        assert_eq!(m.take_block(), Some(0));
        assert_eq!(m.take_block(), None);
        assert_eq!(m.nwhole(), 1);
        let mut out = KVec::with_capacity(200, GFP_KERNEL)?;
        assert_eq!(m.take(200, &mut out), 100);
        assert_eq!(m.nfree(), 0);
        // Double frees and out-of-range pages are ignored.
        assert_eq!(m.put(BLOCK_PAGES, 10), 10);
        assert_eq!(m.put(BLOCK_PAGES, 10), 0);
        assert_eq!(m.put(BLOCK_PAGES + 95, 50), 5);
        // A split folio's block no longer counts as a large folio.
        assert_eq!(m.take_block(), None);
        m.split(0);
        assert_eq!(m.nwhole(), 0);
        m.split(0);
        assert_eq!(m.nwhole(), 0);
        // A whole block freed page by page (a split folio) is whole again.
        for i in 0..BLOCK_PAGES {
            assert_eq!(m.put(i, 1), 1);
        }
        assert_eq!(m.nwhole(), 0);
        assert_eq!(m.nfree_blocks(), 1);
        assert_eq!(m.take_block(), Some(0));
        // `out` full: nothing more is taken.
        let mut full = KVec::with_capacity(0, GFP_KERNEL)?;
        assert_eq!(m.take(5, &mut full), 0);
        assert_eq!(m.nfree(), 15);
        Ok(())
    }
}
