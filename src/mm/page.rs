// SPDX-License-Identifier: GPL-2.0

//! Non-owning handles to `struct page`.
//!
//! The kernel's `page::Page` owns its page and frees it on drop; the pages
//! msvm handles during migration belong to the mm core (device-private pages,
//! a process's pages) or are handed over to it (freshly allocated ones), so a
//! borrowed handle is what fits.

use core::marker::PhantomData;
use core::ptr::NonNull;

use kernel::bindings;
use kernel::error::{code::EINVAL, to_result, Result};
use kernel::mm::virt::VmaRef;
use kernel::num::casts::u32_as_usize;

use super::bindings as b;
use super::numa::{self, Home};

/// The page size (`PAGE_SIZE`).
pub(crate) const PAGE_SIZE: usize = kernel::page::PAGE_SIZE;

/// Pages of a 2 MiB block: what one PMD maps (one page table of PTEs),
/// the size of a large folio, and the most one migration step covers.
/// Blocks are aligned: in a process's address space, in a pagemap's page
/// frames and in the BAR.
pub(crate) const BLOCK_PAGES: usize = 512;

/// Bytes of a 2 MiB block ([`BLOCK_PAGES`] pages).
pub(crate) const BLOCK_SIZE: usize = BLOCK_PAGES * PAGE_SIZE;

/// A `struct page` that someone else keeps alive for `'a`.
///
/// # Invariants
///
/// `0` points to a valid `struct page` for `'a`: each constructor's caller
/// guarantees it (a page locked by a migration, a page found under a
/// mirror's lock, a page of a live pagemap, ...), and the lifetime keeps
/// safe code from using the handle after that.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageRef<'a>(NonNull<bindings::page>, PhantomData<&'a bindings::page>);

// SAFETY: a `struct page` may be referred to from any thread; the handle
// itself carries no access rights beyond what its user's context grants.
unsafe impl Send for PageRef<'_> {}
// SAFETY: see `Send`.
unsafe impl Sync for PageRef<'_> {}

impl<'a> PageRef<'a> {
    /// Wraps a page pointer.
    ///
    /// # Safety
    ///
    /// `page` must point to a valid `struct page` that stays valid for `'a`.
    pub(super) unsafe fn from_raw(page: *mut bindings::page) -> Option<Self> {
        // INVARIANT: the caller's promise.
        NonNull::new(page).map(|p| Self(p, PhantomData))
    }

    /// The page with page frame number `pfn`.
    ///
    /// # Safety
    ///
    /// `pfn` must be the frame of a page with a `struct page` (system RAM, or
    /// a registered pagemap) that stays valid for `'a`.
    pub(super) unsafe fn from_pfn(pfn: usize) -> Self {
        // SAFETY: the caller guarantees `pfn` has a `struct page`.
        let p = unsafe { b::msvm_pfn_to_page(pfn) };
        // INVARIANT: `pfn_to_page` of a valid pfn is a valid page, kept alive
        // by the caller for `'a`.
        Self(
            NonNull::new(p).expect("pfn_to_page returned NULL"),
            PhantomData,
        )
    }

    /// The raw pointer, for the other glue modules.
    pub(crate) fn as_non_null(self) -> NonNull<bindings::page> {
        self.0
    }

    /// The `struct page` pointer.
    pub(super) fn as_ptr(self) -> *mut bindings::page {
        self.0.as_ptr()
    }

    /// The page frame number.
    pub(crate) fn pfn(self) -> usize {
        // SAFETY: the page is valid (type invariant).
        unsafe { b::msvm_page_to_pfn(self.as_ptr()) }
    }

    /// The order of the folio the page belongs to (0: a single page).
    pub(crate) fn folio_order(self) -> u32 {
        // SAFETY: the page is valid (type invariant).
        unsafe { b::msvm_page_folio_order(self.as_ptr()) }
    }

    /// Page `k` after this one within its folio, if the folio has it: for a
    /// folio's first page, its `k`-th page. Valid as long as this one is
    /// (the folio's pages live and die together).
    pub(crate) fn nth(self, k: usize) -> Option<Self> {
        let start = self.pfn();
        // The folio's pages from this one on.
        let nr = 1usize << self.folio_order();
        // SAFETY: the page is valid (type invariant).
        let head = unsafe { b::msvm_page_to_pfn(b::msvm_folio_head(self.as_ptr())) };
        let pfn = start.checked_add(k)?;
        if pfn >= head + nr {
            return None;
        }
        // SAFETY: `pfn` lies within this page's folio, whose `struct
        // page`s are contiguous and valid while this page is (invariant).
        Some(unsafe { Self::from_pfn(pfn) })
    }

    /// The head page of this page's folio (the page itself if small).
    pub(crate) fn head(self) -> Self {
        // SAFETY: the page is valid (type invariant), and so is the head
        // page of its folio, for as long as the page is.
        unsafe { Self::from_raw(b::msvm_folio_head(self.as_ptr())) }.unwrap_or(self)
    }

    /// Whether the page's folio may be mapped by more than one mm (a fork
    /// relative's mapping too): exact for small folios; for large ones it
    /// may say so falsely (once more than two mms mapped the folio, or
    /// always without the kernel's `CONFIG_MM_ID`). A hint unless the
    /// caller keeps every mapping from changing.
    pub(crate) fn maybe_mapped_shared(self) -> bool {
        // SAFETY: the page is valid (type invariant); the call reads its
        // folio's mapcounts.
        unsafe { b::msvm_page_maybe_mapped_shared(self.as_ptr()) }
    }

    /// Whether this is a secretmem page (`memfd_secret()`): not in the
    /// kernel's direct map, never to be read or written by the kernel.
    pub(crate) fn is_secretmem(self) -> bool {
        // SAFETY: the page is valid (type invariant), and so is its
        // mapping while it is mapped, which the caller's context keeps.
        unsafe { b::msvm_page_is_secretmem(self.as_ptr()) }
    }

    /// Whether the page's folio may be pinned for DMA (`FOLL_PIN`): a
    /// device, io_uring or O_DIRECT may write it with no change of the page
    /// tables.
    pub(crate) fn maybe_dma_pinned(self) -> bool {
        // SAFETY: the page is valid (type invariant).
        unsafe { b::msvm_page_maybe_dma_pinned(self.as_ptr()) }
    }

    /// Whether the page belongs to an anonymous folio: private process
    /// memory, the only memory device memory takes.
    pub(crate) fn is_anon(self) -> bool {
        // SAFETY: the page is valid (type invariant).
        unsafe { b::msvm_page_is_anon(self.as_ptr()) }
    }

    /// Whether this is the shared zero page.
    #[allow(dead_code)] // msvm_dmirror.ko's (the glue is built into both modules).
    pub(crate) fn is_zero_page(self) -> bool {
        // SAFETY: a pure function of its argument.
        unsafe { b::msvm_is_zero_pfn(self.pfn()) }
    }

    /// Whether this is a device-private page.
    pub(crate) fn is_device_private(self) -> bool {
        // SAFETY: the page is valid (type invariant).
        unsafe { b::msvm_is_device_private_page(self.as_ptr()) }
    }
}

/// The bytes `kmalloc` gives for a request of `size`: its slab's object
/// size.
pub(crate) fn kmalloc_size(size: usize) -> usize {
    // SAFETY: a pure function of its argument.
    unsafe { bindings::kmalloc_size_roundup(size) }
}

/// The order of the folios msvm migrates whole (2 MiB: a PMD), or 0 if the
/// kernel cannot migrate such folios whole.
pub(crate) fn large_order() -> u32 {
    // SAFETY: reads a constant of the kernel's configuration.
    unsafe { b::msvm_large_order() }
}

/// The kind of system page [`NewPage::home`] allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum How {
    /// A page for a migration into a VMA: may reclaim, may fail.
    Migrate,
    /// A page for data that has nowhere else to go (a device going away):
    /// waits for memory rather than fail.
    Must,
    /// A page if one is free right now, without reclaiming or warning (an
    /// eviction that may fail: making room on a full device).
    Try,
    /// A 2 MiB folio if one is free right now, without retrying.
    Large,
    /// A page msvm keeps for long (an orphan's copy of a device page's
    /// data): not movable (it stays locked, off the LRU), waits for memory
    /// rather than fail.
    Kept,
}

impl How {
    fn raw(self) -> u32 {
        match self {
            How::Migrate => b::MSVM_HOME_MIGRATE,
            How::Must => b::MSVM_HOME_MUST,
            How::Try => b::MSVM_HOME_TRY,
            How::Large => b::MSVM_HOME_LARGE,
            How::Kept => b::MSVM_HOME_KEPT,
        }
    }

    fn large(self) -> bool {
        self == How::Large
    }
}

/// A page prepared as a migration destination: locked, with one reference,
/// ours until handed to a migration ([`super::migrate::VmaMigration::set_dst`]),
/// which unlocks and releases it when it finalizes; released (unlocked and
/// put) on drop otherwise. A system page msvm allocated, or a device page
/// taken off a free map ([`super::pagemap::Pagemap::init_folio`]).
///
/// # Invariants
///
/// `0` is a valid page, locked by us, with a reference of ours.
pub(crate) struct NewPage(NonNull<bindings::page>);

// SAFETY: the lock and reference travel with the value.
unsafe impl Send for NewPage {}

impl NewPage {
    /// Allocates a system page, or a folio of [`large_order`] (2 MiB) for
    /// the large kinds, for data coming home from a device, and locks it:
    /// of kind `how`, for `addr` of `vma` if the move goes through a VMA
    /// (the PMD-aligned block around it for a folio), on the node a NUMA
    /// policy says, else on `home`'s (see [`super::numa`]). Not zeroed: the
    /// caller fills it whole before anything maps it. `None` if none could
    /// be had now (never for [`How::Must`]), or for a large kind if the
    /// kernel does not migrate such folios whole (the caller then moves the
    /// block in small pages).
    pub(crate) fn home(at: Option<(&VmaRef, usize)>, home: Home, how: How) -> Option<Self> {
        let (vma, addr) = at.map_or((core::ptr::null_mut(), 0), |(v, a)| (v.as_ptr(), a));
        // SAFETY: `vma` is null or a valid VMA (the caller holds the mmap or
        // VMA lock, which the borrow proves); any address, node and kind
        // are accepted (an unknown kind gives NULL).
        let p = unsafe { b::msvm_alloc_home(vma, addr, home.nid(), how.raw()) };
        if !how.large() && !p.is_null() {
            numa::count_single();
        }
        Self::lock_new(p)
    }

    /// Allocates a zeroed movable page, or a zeroed 2 MiB folio if `large`
    /// (and the kernel migrates such folios whole), without retrying or
    /// warning, and locks it; `None` if there is none to spare right now.
    pub(crate) fn zeroed_try(large: bool) -> Option<Self> {
        let order = if large { large_order() } else { 0 };
        if large && order == 0 {
            return None;
        }
        // SAFETY: plain folio allocation; any order is accepted (others
        // than 0 and the PMD order give NULL).
        let p = unsafe { b::msvm_alloc_zeroed_try(order) };
        Self::lock_new(p)
    }

    fn lock_new(p: *mut bindings::page) -> Option<Self> {
        let p = NonNull::new(p)?;
        // SAFETY: the page was just allocated: ours, unlocked, so locking
        // cannot deadlock.
        unsafe { b::msvm_lock_page(p.as_ptr()) };
        // INVARIANT: valid while we hold the reference the allocation gave
        // us; locked just above.
        Some(Self(p))
    }

    /// Takes over a page that is already locked and referenced.
    ///
    /// # Safety
    ///
    /// `page` must be a valid page, locked, with a reference, both of which
    /// the caller gives up, and fit to be a migration destination (nobody
    /// else uses it).
    pub(crate) unsafe fn from_locked(page: NonNull<bindings::page>) -> Self {
        // INVARIANT: the caller's promise.
        Self(page)
    }

    /// The page.
    pub(crate) fn page(&self) -> PageRef<'_> {
        // SAFETY: valid while we hold our reference (invariant), which the
        // borrow of `self` bounds.
        unsafe { PageRef::from_raw(self.0.as_ptr()) }.expect("non-null")
    }

    /// Copies page `j` of `src` over page `k` of this folio with the
    /// kernel's `copy_highpage()`, the copy of the reference driver
    /// `test_hmm` (the copy floor times it as that driver's copy). Both are
    /// pages msvm allocated, never a user's (which may be secretmem, with
    /// no kernel mapping). `EINVAL` past either folio, if either is a
    /// device page (no memory behind its `struct page`), or if both are the
    /// same page (`self` passed as `src` too: a copy onto itself).
    pub(crate) fn copy_page_from(&self, k: usize, src: &NewPage, j: usize) -> Result {
        let dst = self.page().nth(k).ok_or(EINVAL)?;
        let from = src.page().nth(j).ok_or(EINVAL)?;
        if dst.pfn() == from.pfn() {
            return Err(EINVAL);
        }
        // SAFETY: `dst` is a page of our folio and `from` one of `src`'s,
        // two distinct pages (checked above; `src` may be `self`, borrowed
        // twice shared): valid, locked and used by nobody else (invariant)
        // for the borrows. Both were allocated by msvm: system pages with a
        // kernel mapping, or device pages, which the helper refuses.
        to_result(unsafe { b::msvm_copy_highpage(dst.as_ptr(), from.as_ptr()) })
    }

    /// Hands the page over to a migration, which unlocks and releases it
    /// when it finalizes.
    #[must_use = "the page leaks unless a migration takes it"]
    pub(crate) fn into_raw(self) -> NonNull<bindings::page> {
        let p = self.0;
        core::mem::forget(self);
        p
    }
}

impl Drop for NewPage {
    fn drop(&mut self) {
        // SAFETY: we locked the page and hold a reference (invariant), given
        // up here.
        unsafe {
            bindings::unlock_page(self.0.as_ptr());
            b::msvm_put_page(self.0.as_ptr());
        }
    }
}

/// How many pages [`NewPages`] takes from the page allocator at a time.
const BATCH: usize = 32;

/// Movable user pages for the small-page destinations of one migration
/// step into a VMA, taken from the page allocator in batches
/// ([`NewPages::take`]); what is left over is freed on drop.
///
/// # Invariants
///
/// `pages[next..len]` are valid pages, each with one reference of ours and
/// nothing else: unlocked, unmapped, seen by nobody.
pub(crate) struct NewPages {
    pages: [*mut bindings::page; BATCH],
    next: usize,
    len: usize,
    /// How many more pages the caller said it may take.
    want: usize,
    /// Whether to try the bulk path for the next batch.
    bulk: bool,
    /// Where the pages go when no NUMA policy decides.
    home: Home,
}

impl NewPages {
    /// A source of at most `want` pages (the caller's count of the small
    /// pages its step moves) for data coming home to `home` (see
    /// [`NewPage::home`]), none allocated yet.
    pub(crate) fn new(want: usize, home: Home) -> Self {
        // INVARIANT: no pages held.
        Self {
            pages: [core::ptr::null_mut(); BATCH],
            next: 0,
            len: 0,
            want,
            bulk: true,
            home,
        }
    }

    /// A locked page for `addr` of `vma`, the migration's VMA (as
    /// [`NewPage::home`], [`How::Migrate`]): from the batch, refilled in
    /// bulk while the caller's count lasts, else on its own (a NUMA policy
    /// decides, which the bulk path does not follow, the count is spent, or
    /// memory is short); `None` if no page could be had.
    pub(crate) fn take(&mut self, vma: &VmaRef, addr: usize) -> Option<NewPage> {
        if self.next == self.len && self.want > 1 && self.bulk {
            // CAST: at most `BATCH` (32), which fits in `u32`.
            let n = self.want.min(BATCH) as u32;
            let pages = self.pages.as_mut_ptr();
            let nid = self.home.nid();
            // SAFETY: `vma` is a valid VMA (the caller holds the mmap or
            // VMA lock, which the borrow proves); `pages` has room for `n`
            // pointers, and the batch is empty (we hold nothing there).
            let got = unsafe { b::msvm_alloc_pages_bulk_vma(vma.as_ptr(), nid, n, pages) };
            // INVARIANT: the helper filled `pages[..got]` with pages of one
            // reference each, ours.
            (self.next, self.len) = (0, u32_as_usize(got).min(BATCH));
            // None: a NUMA policy, or memory short (the allocator's own
            // fallback already reclaimed): one by one from here on.
            self.bulk = got > 0;
            numa::count_bulk(u64::from(got));
        }
        self.want = self.want.saturating_sub(1);
        if self.next < self.len {
            let p = self.pages[self.next];
            // INVARIANT: the page leaves the batch; `NewPage` holds it now.
            self.next += 1;
            return NewPage::lock_new(p);
        }
        NewPage::home(Some((vma, addr)), self.home, How::Migrate)
    }
}

impl Drop for NewPages {
    fn drop(&mut self) {
        for &p in &self.pages[self.next..self.len] {
            // SAFETY: a page of ours, with a reference that we give up
            // (invariant); nobody else has seen it.
            unsafe { b::msvm_put_page(p) };
        }
    }
}

#[kernel::macros::kunit_tests(msvm_page)]
mod tests {
    use super::*;

    #[test]
    fn copy_onto_itself_is_refused() {
        let a = NewPage::home(None, Home::LOCAL, How::Must).expect("a page");
        let b = NewPage::home(None, Home::LOCAL, How::Must).expect("a page");
        assert_eq!(a.copy_page_from(0, &a, 0), Err(EINVAL));
        assert_eq!(a.copy_page_from(0, &b, 0), Ok(()));
        // Past the (small) folios.
        assert_eq!(a.copy_page_from(1, &b, 0), Err(EINVAL));
    }
}
