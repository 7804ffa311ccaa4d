// SPDX-License-Identifier: GPL-2.0

//! Non-owning handles to `struct page`.
//!
//! The kernel's `page::Page` owns its page and frees it on drop; the pages
//! msvm handles during migration belong to the mm core (device-private pages,
//! a process's pages) or are handed over to it (freshly allocated ones), so a
//! borrowed handle is what fits.

use core::ptr::NonNull;

use kernel::bindings;

use super::bindings as b;

/// A `struct page` that someone else keeps alive.
///
/// # Invariants
///
/// `0` points to a valid `struct page` for as long as the handle is used:
/// each constructor's caller guarantees it (a page locked by a migration, a
/// page of a live pagemap, ...).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageRef(NonNull<bindings::page>);

// SAFETY: a `struct page` may be referred to from any thread; the handle
// itself carries no access rights beyond what its user's context grants.
unsafe impl Send for PageRef {}
// SAFETY: see `Send`.
unsafe impl Sync for PageRef {}

impl PageRef {
    /// Wraps a page pointer.
    ///
    /// # Safety
    ///
    /// `page` must point to a valid `struct page` that stays valid while the
    /// handle (or a copy of it) is used.
    pub(crate) unsafe fn from_raw(page: *mut bindings::page) -> Option<Self> {
        NonNull::new(page).map(Self)
    }

    /// The page with page frame number `pfn`.
    ///
    /// # Safety
    ///
    /// `pfn` must be the frame of a page with a `struct page` (system RAM, or
    /// a registered pagemap) that stays valid while the handle is used.
    pub(crate) unsafe fn from_pfn(pfn: usize) -> Self {
        // SAFETY: the caller guarantees `pfn` has a `struct page`.
        let p = unsafe { b::msvm_pfn_to_page(pfn) };
        // INVARIANT: `pfn_to_page` of a valid pfn is a valid page, kept alive
        // by the caller.
        Self(NonNull::new(p).expect("pfn_to_page returned NULL"))
    }

    /// The raw pointer, for the other glue modules.
    pub(super) fn as_ptr(self) -> *mut bindings::page {
        self.0.as_ptr()
    }

    /// The page frame number.
    pub(crate) fn pfn(self) -> usize {
        // SAFETY: the page is valid (type invariant).
        unsafe { b::msvm_page_to_pfn(self.as_ptr()) }
    }

    /// Unlocks the page and drops the caller's reference: for a page
    /// prepared as a migration destination that was not used.
    ///
    /// # Safety
    ///
    /// The caller holds the page's lock and a reference, and gives both up.
    pub(crate) unsafe fn release_locked(self) {
        // SAFETY: the caller holds the lock and the reference.
        unsafe {
            b::msvm_unlock_page(self.as_ptr());
            b::msvm_put_page(self.as_ptr());
        }
    }

    /// Whether this is a device-private page.
    pub(crate) fn is_device_private(self) -> bool {
        // SAFETY: the page is valid (type invariant).
        unsafe { b::msvm_is_device_private_page(self.as_ptr()) }
    }
}

/// A system page allocated by msvm for a migration, locked, that the
/// migration hands over to the mm core (or frees, if the migration does not
/// take it).
pub(crate) struct NewPage(PageRef);

impl NewPage {
    /// Allocates a movable user page for `addr` of the VMA the migration
    /// works on, and locks it.
    pub(crate) fn for_vma(vma: &kernel::mm::virt::VmaRef, addr: usize) -> Option<Self> {
        // SAFETY: `vma` is a valid VMA (the caller holds the mmap or VMA lock,
        // which the borrow proves); any address is accepted.
        let p = unsafe { b::msvm_alloc_page_vma(vma.as_ptr(), addr) };
        Self::lock_new(p)
    }

    /// Allocates a movable user page without a VMA, waiting for memory
    /// rather than failing (device eviction: the data has nowhere else to
    /// go), and locks it.
    pub(crate) fn must() -> Option<Self> {
        // SAFETY: plain page allocation.
        let p = unsafe { b::msvm_alloc_page_nofail() };
        Self::lock_new(p)
    }

    fn lock_new(p: *mut bindings::page) -> Option<Self> {
        // SAFETY: a page just allocated is valid while we hold its reference.
        let page = unsafe { PageRef::from_raw(p) }?;
        // SAFETY: the page is ours and unlocked: locking cannot deadlock.
        unsafe { b::msvm_lock_page(page.as_ptr()) };
        Some(Self(page))
    }

    /// The page.
    pub(crate) fn page(&self) -> PageRef {
        self.0
    }

    /// Hands the page over to a migration, which unlocks and releases it when
    /// it finalizes.
    pub(crate) fn into_migration(self) -> PageRef {
        let p = self.0;
        core::mem::forget(self);
        p
    }
}

impl Drop for NewPage {
    fn drop(&mut self) {
        // SAFETY: we locked the page and hold its only reference.
        unsafe {
            b::msvm_unlock_page(self.0.as_ptr());
            b::msvm_put_page(self.0.as_ptr());
        }
    }
}
