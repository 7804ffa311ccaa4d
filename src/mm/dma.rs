// SPDX-License-Identifier: GPL-2.0

//! Streaming DMA mappings of system pages for a device: what a device uses
//! to reach system RAM.

use kernel::{bindings, device, device::Bound};

use super::bindings as b;
use super::page::PageRef;

/// A page mapped for DMA by one device (bidirectional, one page), unmapped
/// on drop.
///
/// # Invariants
///
/// `addr` is a live mapping of `page` for `dev`, made by `dma_map_page`.
pub(crate) struct DmaPage<'a> {
    dev: &'a device::Device<Bound>,
    page: PageRef,
    addr: u64,
}

impl<'a> DmaPage<'a> {
    /// Maps `page` for `dev`.
    pub(crate) fn map(dev: &'a device::Device<Bound>, page: PageRef) -> Option<Self> {
        // SAFETY: `dev` is a live device (the borrow) and `page` a valid page
        // that the caller keeps alive while mapped.
        let addr = unsafe { b::msvm_dma_map_page(raw(dev), page.as_ptr()) };
        (addr != 0).then_some(Self { dev, page, addr })
    }

    /// The device-visible address of the page.
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }

    /// The page.
    pub(crate) fn page(&self) -> PageRef {
        self.page
    }
}

impl Drop for DmaPage<'_> {
    fn drop(&mut self) {
        // SAFETY: a live mapping for `dev` (invariant).
        unsafe { b::msvm_dma_unmap_page(raw(self.dev), self.addr) };
    }
}

/// `device::Device` is `#[repr(transparent)]` over `Opaque<bindings::device>`.
fn raw(dev: &device::Device<Bound>) -> *mut bindings::device {
    core::ptr::from_ref(dev)
        .cast::<bindings::device>()
        .cast_mut()
}

/// CPU access to a system page (the address decoder's system-RAM path).
impl PageRef {
    /// Copies `buf.len()` bytes at `off` of the page into `buf`.
    pub(crate) fn read(self, off: usize, buf: &mut [u8]) {
        assert!(off + buf.len() <= super::pagemap::PAGE_SIZE);
        // SAFETY: in bounds (asserted); the page is valid (type invariant)
        // and not device-private (callers decode only system pages here).
        unsafe {
            b::msvm_page_read(
                self.as_ptr(),
                off as u32,
                buf.as_mut_ptr().cast(),
                buf.len() as u32,
            )
        };
    }

    /// Copies `buf` to `off` of the page.
    pub(crate) fn write(self, off: usize, buf: &[u8]) {
        assert!(off + buf.len() <= super::pagemap::PAGE_SIZE);
        // SAFETY: as in `read`.
        unsafe {
            b::msvm_page_write(
                self.as_ptr(),
                off as u32,
                buf.as_ptr().cast(),
                buf.len() as u32,
            )
        };
    }

    /// Atomically adds `value` to the `u64` at `off` (8-byte aligned).
    pub(crate) fn add_u64(self, off: usize, value: u64) {
        assert!(off % 8 == 0 && off + 8 <= super::pagemap::PAGE_SIZE);
        // SAFETY: aligned and in bounds (asserted); the page is valid.
        unsafe { b::msvm_page_add_u64(self.as_ptr(), off as u32, value) };
    }
}
