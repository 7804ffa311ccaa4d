// SPDX-License-Identifier: GPL-2.0

//! Backing blocks: system pages that hold the memory of a device the CPU
//! emulates (the "device memory" of `test_hmm`'s dmirror: a system page
//! behind each device-private page, a 2 MiB block of them behind a 2 MiB
//! device folio), and the copies between them and the pages a migration
//! moves.
//!
//! A [`Block`] is `1 << order` contiguous system pages its device owns:
//! allocated at once (one call to the page allocator for a whole 2 MiB
//! folio, as `test_hmm`'s `folio_alloc`), freed at once, or parted into
//! single pages ([`Block::split`]) when its device folio is freed piece by
//! piece. The copies are C's (`copy_highpage`): the pages they read may be
//! written by user space at the same time (see [`SysPage`]).

use core::ptr::NonNull;

use kernel::prelude::*;

use super::bindings as b;
use super::dma::SysPage;
use super::page::{NewPage, PageRef};

/// The largest order of a [`Block`]: a 2 MiB block's (`HPAGE_PMD_ORDER`
/// on x86 with 4 KiB pages), whatever the allocator could give.
pub(crate) const MAX_ORDER: u32 = 9;

/// `1 << order` contiguous system pages, allocated together but not as a
/// compound folio, so that they can part ([`Block::split`]).
///
/// # Invariants
///
/// `first` is the first of `1 << order` system pages in the direct map
/// that the block owns and frees when dropped: either the pages one
/// `alloc_pages` call returned for `order` (at most [`MAX_ORDER`]), without
/// `__GFP_COMP` or `__GFP_HIGHMEM`, or (order 0) one page of such an
/// allocation that `split_page` parted, with a reference of its own.
pub(crate) struct Block {
    first: NonNull<b::page>,
    order: u32,
}

// SAFETY: a block is memory it owns, with no state bound to a thread; it is
// freed from any context.
unsafe impl Send for Block {}
// SAFETY: a shared block gives only copies in and out of its pages, which
// are C's racy copies (see `SysPage`).
unsafe impl Sync for Block {}

impl Block {
    /// `1 << order` new system pages, zeroed if `zeroed`: `ENOMEM` if the
    /// allocator has none (a large block is not worth a hard reclaim: the
    /// caller falls back to small ones), `EINVAL` past [`MAX_ORDER`].
    pub(crate) fn alloc(order: u32, zeroed: bool) -> Result<Self> {
        if order > MAX_ORDER {
            return Err(EINVAL);
        }
        // SAFETY: any order up to `MAX_ORDER` is valid. (The allocation
        // may sleep, as `Page::alloc_page(GFP_KERNEL)`'s: a bug in atomic
        // context that `might_sleep` reports, not undefined behaviour.)
        let p = unsafe { b::msvm_alloc_block(order, zeroed) };
        // INVARIANT: the helper allocates `1 << order` pages with
        // `alloc_pages`, neither compound nor high.
        Ok(Self {
            first: NonNull::new(p).ok_or(ENOMEM)?,
            order,
        })
    }

    /// Its pages: `1 << order`.
    pub(crate) fn nr_pages(&self) -> usize {
        1 << self.order
    }

    /// Page `k` of the block, `None` past its end.
    fn page(&self, k: usize) -> Option<PageRef<'_>> {
        if k >= self.nr_pages() {
            return None;
        }
        // SAFETY: `first` is a valid page we own (invariant).
        let first = unsafe { PageRef::from_raw(self.first.as_ptr()) }?;
        // SAFETY: the pages of one allocation have consecutive frames, with
        // `struct page`s; we own them while borrowed (invariant).
        Some(unsafe { PageRef::from_pfn(first.pfn() + k) })
    }

    /// The contents of page `k`, to read and write; `None` past the end.
    pub(crate) fn contents(&self, k: usize) -> Option<SysPage<'_>> {
        // A page the allocator gave, in the direct map (invariant).
        SysPage::new(self.page(k)?)
    }

    /// Copies the system page `src` (a migration's source) into page `k`:
    /// `EINVAL` past the end, or for a device-private or secretmem `src`
    /// (no memory behind it, or none in the kernel's map).
    pub(crate) fn copy_in(&self, k: usize, src: PageRef<'_>) -> Result {
        let dst = self.page(k).ok_or(EINVAL)?;
        if src.is_device_private() || src.is_secretmem() {
            return Err(EINVAL);
        }
        // SAFETY: both are valid system pages in the direct map (checked,
        // and the invariant), for the borrows; `dst` is ours, which nobody
        // hands to a migration, so it is not `src`. A racy copy, as every
        // kernel copy of a user page.
        kernel::error::to_result(unsafe { b::msvm_copy_highpage(dst.as_ptr(), src.as_ptr()) })
    }

    /// Copies page `k` into page `j` of `dst`, a folio a migration will
    /// install: `EINVAL` past either end.
    pub(crate) fn copy_out(&self, k: usize, dst: &NewPage, j: usize) -> Result {
        let src = self.page(k).ok_or(EINVAL)?;
        let d = dst.page().nth(j).ok_or(EINVAL)?;
        // SAFETY: `d` is a page of a folio the caller holds locked and
        // nobody else sees; `copy_highpage` refuses device pages (no memory
        // behind them); `src` is a system page we own.
        kernel::error::to_result(unsafe { b::msvm_copy_highpage(d.as_ptr(), src.as_ptr()) })
    }

    /// Parts the block into its pages, each a block of order 0 with the
    /// same data, first to last (`split_page`). Allocates nothing: a lock
    /// may be held.
    pub(crate) fn split(self) -> Split {
        let this = core::mem::ManuallyDrop::new(self);
        // (Always a page: `first` is not null.)
        let (first, nr) = this.page(0).map_or((0, 0), |p| (p.pfn(), this.nr_pages()));
        // SAFETY: a non-compound allocation of `order` that we own
        // (invariant); after the call each of its pages has a reference of
        // its own, which `Split` takes over.
        unsafe { b::split_page(this.first.as_ptr(), this.order) };
        // INVARIANT: the frames `first..first + nr` are single pages we
        // own, one reference each.
        Split { first, next: 0, nr }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: we own the allocation of `order` from `first` (or, for
        // order 0, the page's one reference) (invariant).
        unsafe { b::__free_pages(self.first.as_ptr(), self.order) };
    }
}

/// The pages of a [`Block`] that was split, each taken as a block of order
/// 0; those not taken are freed with it.
///
/// # Invariants
///
/// The frames `first + next..first + nr` are single system pages in the
/// direct map with a reference this value owns.
pub(crate) struct Split {
    first: usize,
    next: usize,
    nr: usize,
}

impl Iterator for Split {
    type Item = Block;

    /// The next page, taken out of the split.
    fn next(&mut self) -> Option<Block> {
        if self.next == self.nr {
            return None;
        }
        // SAFETY: frame `first + next` is a page of ours (invariant), with a
        // `struct page`.
        let page = unsafe { PageRef::from_pfn(self.first + self.next) };
        self.next += 1;
        // INVARIANT: a single page (order 0) in the direct map whose
        // reference we held, now the new block's; `next` moved past it.
        Some(Block {
            first: page.as_non_null(),
            order: 0,
        })
    }
}

impl Drop for Split {
    fn drop(&mut self) {
        // Each page left goes with its block.
        for _ in self.by_ref() {}
    }
}

/// A buffer of `size` zero bytes, for the data a device's reads and writes
/// carry to and from user space: zeroed by the allocator (`__GFP_ZERO`),
/// not byte by byte. `ENOMEM`, without a warning, for a size user space
/// chose too large.
pub(crate) fn zeroed_buffer(size: usize) -> Result<KVVec<u8>> {
    let mut v = KVVec::with_capacity(size, GFP_KERNEL | __GFP_ZERO | __GFP_NOWARN)?;
    // SAFETY: the capacity is at least `size` (just allocated for it), and
    // the allocator zeroed it all (`__GFP_ZERO`): zero is a valid `u8`.
    unsafe { v.inc_len(size) };
    Ok(v)
}

#[kunit_tests(msvm_backing)]
mod tests {
    use super::super::page::PAGE_SIZE;
    use super::*;

    /// The last byte of each page of `b`.
    fn lasts(b: &Block) -> Result<KVec<u8>> {
        let mut v = KVec::new();
        for k in 0..b.nr_pages() {
            let mut x = [0u8; 1];
            b.contents(k).ok_or(EINVAL)?.read(PAGE_SIZE - 1, &mut x);
            v.push(x[0], GFP_KERNEL)?;
        }
        Ok(v)
    }

    /// A block's pages keep their data when it parts, each its own block
    /// of order 0, first to last; none past the end.
    #[test]
    fn split_keeps_each_pages_data_in_order() -> Result {
        let b = Block::alloc(3, true)?;
        assert_eq!(b.nr_pages(), 8);
        assert_eq!(&lasts(&b)?[..], &[0u8; 8]);
        for k in 0..8u8 {
            b.contents(k.into())
                .ok_or(EINVAL)?
                .write(PAGE_SIZE - 1, &[k + 1]);
        }
        assert!(b.contents(8).is_none());
        let mut parts = b.split();
        for k in 0..5u8 {
            let p = parts.next().ok_or(EINVAL)?;
            assert_eq!(p.nr_pages(), 1);
            assert_eq!(&lasts(&p)?[..], &[k + 1]);
        }
        // The three left are freed with the split.
        drop(parts);
        Ok(())
    }

    /// A copy goes from a page to the page asked, and no further than a
    /// block's end; an order past a 2 MiB block's is refused.
    #[test]
    fn copies_go_page_to_page_within_bounds() -> Result {
        let a = Block::alloc(1, true)?;
        let c = Block::alloc(1, true)?;
        a.contents(1).ok_or(EINVAL)?.write(0, &[7, 8, 9]);
        c.copy_in(0, a.page(1).ok_or(EINVAL)?)?;
        let mut x = [0u8; 3];
        c.contents(0).ok_or(EINVAL)?.read(0, &mut x);
        assert_eq!(x, [7, 8, 9]);
        c.contents(1).ok_or(EINVAL)?.read(0, &mut x);
        assert_eq!(x, [0, 0, 0]);
        assert_eq!(c.copy_in(2, a.page(0).ok_or(EINVAL)?), Err(EINVAL));
        assert!(a.page(2).is_none());
        assert!(Block::alloc(MAX_ORDER + 1, false).is_err());
        Ok(())
    }
}
