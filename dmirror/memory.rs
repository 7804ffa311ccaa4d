// SPDX-License-Identifier: GPL-2.0

//! The data behind a chunk's device pages: a backing [`Block`] of system
//! pages for each device folio (`test_hmm`'s `zone_device_data` backing
//! page, or folio for a 2 MiB device folio), found by the index of a page
//! in its chunk.
//!
//! A device folio may be freed piece by piece after the core split it:
//! the block behind it is then split too, on the first piece freed (so a
//! folio moved whole costs one allocation and one free, as in `test_hmm`).

use kernel::prelude::*;

use crate::mm::backing::{Block, MAX_ORDER};

/// What holds the data of one device page.
enum Slot {
    /// Nothing: the page is free.
    Free,
    /// The block behind the folio that starts here (its page 0).
    Head(Block),
    /// Page `k` of the block `k` slots before.
    Tail(u32),
}

/// The data behind each page of a chunk.
///
/// # Invariants
///
/// A `Tail(k)` slot `i` has `k > 0` and a `Head` slot `i - k` whose block
/// has more than `k` pages; a `Head` block's pages all lie in the chunk.
pub(crate) struct Memory(KVVec<Slot>);

impl Memory {
    /// Nothing behind any of `npages` pages: `ENOMEM` if the table cannot
    /// be had.
    pub(crate) fn new(npages: usize) -> Result<Self> {
        let mut slots = KVVec::with_capacity(npages, GFP_KERNEL)?;
        for _ in 0..npages {
            slots.push(Slot::Free, GFP_KERNEL)?;
        }
        // INVARIANT: no heads, no tails.
        Ok(Self(slots))
    }

    /// The block behind page `i`, and which of its pages it is.
    pub(crate) fn get(&self, i: usize) -> Option<(&Block, usize)> {
        match self.0.get(i)? {
            Slot::Free => None,
            Slot::Head(b) => Some((b, 0)),
            Slot::Tail(k) => {
                // CAST: a page of a block, fewer than `1 << MAX_ORDER`.
                let k = *k as usize;
                match self.0.get(i - k)? {
                    Slot::Head(b) => Some((b, k)),
                    _ => None,
                }
            }
        }
    }

    /// Puts `blocks` behind the pages from `first` on, one after another:
    /// `EINVAL` for a block that does not fit in the chunk, `EBUSY` for one
    /// whose pages have data already (freed pages drop theirs: a page just
    /// allocated has none); such a block and those after it are dropped,
    /// those before it stay.
    pub(crate) fn set(&mut self, first: usize, blocks: impl IntoIterator<Item = Block>) -> Result {
        let mut at = first;
        for b in blocks {
            let n = b.nr_pages();
            let end = at.checked_add(n).ok_or(EINVAL)?;
            let slots = self.0.get(at..end).ok_or(EINVAL)?;
            if !slots.iter().all(|s| matches!(s, Slot::Free)) {
                return Err(EBUSY);
            }
            for k in 1..n {
                // CAST: `n` is at most `1 << MAX_ORDER`.
                self.0[at + k] = Slot::Tail(k as u32);
            }
            // INVARIANT: the tails just written name this head, within the
            // chunk (checked).
            self.0[at] = Slot::Head(b);
            at += n;
        }
        Ok(())
    }

    /// Takes the data of the pages `i..i + left` that go first: the block
    /// of a whole folio that starts at `i` and fits in them, else page `i`
    /// alone, its block split if it has more pages. Returns it (to free
    /// outside the lock) and how many pages it covered. Allocates nothing
    /// (called when the mm core frees a folio).
    pub(crate) fn take(&mut self, i: usize, left: usize) -> (Option<Block>, usize) {
        let Some(slot) = self.0.get(i) else {
            return (None, left.max(1));
        };
        let head = match *slot {
            Slot::Free => return (None, 1),
            Slot::Head(ref b) if b.nr_pages() > left => i,
            Slot::Head(_) => return self.take_whole(i),
            // CAST: as in `get`.
            Slot::Tail(k) => i - k as usize,
        };
        // Part the block, each page its own head, then take page `i`'s.
        // Its head is a `Head` (invariant); should it not be, the slot
        // alone is let go.
        let Some(Slot::Head(_)) = self.0.get(head) else {
            self.0[i] = Slot::Free;
            return (None, 1);
        };
        let (b, _) = self.take_whole(head);
        for (k, p) in b.into_iter().flat_map(Block::split).enumerate() {
            if let Some(s) = self.0.get_mut(head + k) {
                // INVARIANT: the tails become heads of order 0.
                *s = Slot::Head(p);
            }
        }
        match self.0.get_mut(i).map(|s| core::mem::replace(s, Slot::Free)) {
            Some(Slot::Head(b)) => (Some(b), 1),
            _ => (None, 1),
        }
    }

    /// Takes the block whose head is slot `i`, its tails let go too, and
    /// how many pages it covered.
    fn take_whole(&mut self, i: usize) -> (Option<Block>, usize) {
        let Some(Slot::Head(b)) = self.0.get_mut(i).map(|s| core::mem::replace(s, Slot::Free))
        else {
            return (None, 1);
        };
        let n = b.nr_pages();
        // INVARIANT: the tails go with their head.
        for s in self.0.iter_mut().skip(i + 1).take(n - 1) {
            *s = Slot::Free;
        }
        (Some(b), n)
    }
}

/// The order of a block of `nr` pages (a folio's: a power of two), if a
/// block can have it.
pub(crate) fn order_of(nr: usize) -> Option<u32> {
    let order = nr.trailing_zeros();
    (nr.is_power_of_two() && order <= MAX_ORDER).then_some(order)
}

#[kunit_tests(msvm_dmirror_memory)]
mod tests {
    use super::*;

    /// The first byte of the page behind device page `i`.
    fn first_byte(m: &Memory, i: usize) -> Option<u8> {
        let (b, k) = m.get(i)?;
        let mut x = [0u8; 1];
        b.contents(k)?.read(0, &mut x);
        Some(x[0])
    }

    /// A block of 8 pages behind pages 8..16, each page `k` of it holding
    /// `k + 1`.
    fn eight() -> Result<Memory> {
        let mut m = Memory::new(32)?;
        let b = Block::alloc(3, true)?;
        for k in 0..8u8 {
            b.contents(k.into()).ok_or(EINVAL)?.write(0, &[k + 1]);
        }
        m.set(8, [b])?;
        Ok(m)
    }

    /// Each page of a folio finds its page of the block, and a folio freed
    /// whole gives the block back whole.
    #[test]
    fn a_folio_finds_its_pages_and_goes_whole() -> Result {
        let mut m = eight()?;
        assert_eq!(first_byte(&m, 7), None);
        assert_eq!(first_byte(&m, 8), Some(1));
        assert_eq!(first_byte(&m, 13), Some(6));
        assert_eq!(first_byte(&m, 16), None);
        let (b, n) = m.take(8, 8);
        assert_eq!((b.map(|b| b.nr_pages()), n), (Some(8), 8));
        assert!((8..16).all(|i| m.get(i).is_none()));
        // Nothing behind a free page; past the end, the rest of the range.
        assert_eq!(m.take(20, 1).1, 1);
        assert_eq!(m.take(40, 3).1, 3);
        Ok(())
    }

    /// A folio the core split is freed a piece at a time: its block parts
    /// on the first piece, and the other pages keep their data.
    #[test]
    fn pieces_part_the_block_and_keep_the_rest() -> Result {
        let mut m = eight()?;
        let (b, n) = m.take(13, 1);
        assert_eq!((b.map(|b| b.nr_pages()), n), (Some(1), 1));
        assert_eq!(first_byte(&m, 13), None);
        for i in (8..16).filter(|&i| i != 13) {
            // CAST: `i - 7` is at most 8.
            assert_eq!(first_byte(&m, i), Some((i - 7) as u8));
        }
        // The head, freed alone now, is a page of its own.
        assert_eq!(m.take(8, 8).1, 1);
        assert_eq!(first_byte(&m, 9), Some(2));
        Ok(())
    }

    /// A block that does not fit in the chunk is refused; orders are
    /// those of powers of two up to a 2 MiB block's.
    #[test]
    fn blocks_fit_the_chunk_and_free_pages() -> Result {
        let mut m = Memory::new(4)?;
        let b = Block::alloc(2, false)?;
        assert_eq!(m.set(2, [b]), Err(EINVAL));
        m.set(1, [Block::alloc(0, false)?])?;
        // Not over data already there.
        assert_eq!(m.set(0, [Block::alloc(1, false)?]), Err(EBUSY));
        assert!(m.get(0).is_none());
        assert_eq!(order_of(512), Some(9));
        assert_eq!(order_of(1), Some(0));
        assert_eq!(order_of(3), None);
        assert_eq!(order_of(1024), None);
        Ok(())
    }
}
