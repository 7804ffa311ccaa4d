// SPDX-License-Identifier: GPL-2.0

//! Streaming DMA mappings of system pages for a device: what a device uses
//! to reach system RAM.

use kernel::{bindings, device, device::Bound, num::casts::FromSafeCast};

use super::bindings as b;
use super::page::{PageRef, PAGE_SIZE};

/// A page mapped for DMA by one device (bidirectional, one page, no CPU
/// sync at either end: see `msvm_dma_map_page`), unmapped on drop.
///
/// # Invariants
///
/// `addr` is a live mapping of `page` for `dev`, made by `dma_map_page`.
pub(crate) struct DmaPage<'a> {
    dev: &'a device::Device<Bound>,
    page: PageRef<'a>,
    addr: u64,
}

impl<'a> DmaPage<'a> {
    /// Maps `page`, a system page, for `dev`; `None` if it cannot be
    /// mapped, or if the kernel must not touch it (a secretmem page, which
    /// is not in the direct map: a bounce buffer, or the CPU side of the
    /// emulated device, would fault on it).
    pub(crate) fn map(dev: &'a device::Device<Bound>, page: PageRef<'a>) -> Option<Self> {
        if page.is_device_private() || page.is_secretmem() {
            return None;
        }
        // SAFETY: `dev` is a live device (the borrow) and `page` a valid page
        // for `'a`, which the mapping cannot outlive.
        let addr = unsafe { b::msvm_dma_map_page(raw(dev), page.as_ptr()) };
        // INVARIANT: unless 0 (it failed), `addr` is the mapping of `page`
        // for `dev` just made.
        (addr != 0).then_some(Self { dev, page, addr })
    }

    /// The device-visible address of the page.
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }

    /// The page.
    pub(crate) fn page(&self) -> PageRef<'a> {
        self.page
    }
}

impl Drop for DmaPage<'_> {
    fn drop(&mut self) {
        // SAFETY: a live mapping for `dev` (invariant).
        unsafe {
            bindings::dma_unmap_page_attrs(
                raw(self.dev),
                self.addr,
                PAGE_SIZE,
                bindings::dma_data_direction::DMA_BIDIRECTIONAL,
                // As mapped (`msvm_dma_map_page`).
                usize::from_safe_cast(bindings::DMA_ATTR_SKIP_CPU_SYNC),
            )
        };
    }
}

/// A page of a peer device's memory (a piece of its BAR) mapped for P2P
/// access by one device, unmapped on drop.
///
/// This is the one place that decides how a device reaches a peer's
/// memory: today `dma_map_resource` of the peer's BAR (what upstream's
/// drm_pagemap does); P2P pages of a published `pci_p2pdma` region would fit
/// behind the same type.
///
/// # Invariants
///
/// `addr` is a live mapping of one page at `phys` for `dev`.
pub(crate) struct PeerMap<'a> {
    dev: &'a device::Device<Bound>,
    addr: u64,
}

impl<'a> PeerMap<'a> {
    /// Maps the page of peer memory at CPU physical address `phys` for `dev`.
    pub(crate) fn map(dev: &'a device::Device<Bound>, phys: u64) -> Option<Self> {
        // SAFETY: `dev` is live (the borrow); `phys` is a page of a peer's
        // BAR that the caller keeps mapped while this mapping lives.
        let addr = unsafe { b::msvm_dma_map_resource(raw(dev), phys) };
        // INVARIANT: unless 0 (it failed), `addr` is the mapping of the page
        // at `phys` for `dev` just made.
        (addr != 0).then_some(Self { dev, addr })
    }

    /// The device-visible (bus) address of the peer page.
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }
}

impl Drop for PeerMap<'_> {
    fn drop(&mut self) {
        // SAFETY: a live mapping for `dev` (invariant).
        unsafe {
            bindings::dma_unmap_resource(
                raw(self.dev),
                self.addr,
                PAGE_SIZE,
                bindings::dma_data_direction::DMA_BIDIRECTIONAL,
                0,
            )
        };
    }
}

/// `device::Device` is `#[repr(transparent)]` over `Opaque<bindings::device>`.
fn raw(dev: &device::Device<Bound>) -> *mut bindings::device {
    core::ptr::from_ref(dev)
        .cast::<bindings::device>()
        .cast_mut()
}

/// CPU access to the mapped page: the emulated device's accesses to system
/// RAM, which reach the page itself (the decoder resolves the DMA address
/// to the page it maps, as an IOMMU walk would; see `msvm_dma_map_page`:
/// no bounce buffer is ever synced over it).
impl DmaPage<'_> {
    /// Copies `buf.len()` bytes at `off` of the page into `buf`.
    pub(crate) fn read(&self, off: usize, buf: &mut [u8]) {
        assert!(off + buf.len() <= PAGE_SIZE);
        // CAST: both at most `PAGE_SIZE` (asserted), which fits in `u32`.
        let (off, len) = (off as u32, buf.len() as u32);
        // SAFETY: in bounds (asserted); the page is a valid system page
        // (mapped for DMA, so not device-private) that the mapping's owner
        // keeps alive, and it is in the direct map (`map` refuses
        // secretmem pages).
        unsafe { b::msvm_page_read(self.page.as_ptr(), off, buf.as_mut_ptr().cast(), len) };
    }

    /// Copies `buf` to `off` of the page.
    pub(crate) fn write(&self, off: usize, buf: &[u8]) {
        assert!(off + buf.len() <= PAGE_SIZE);
        // CAST: as in `read`.
        let (off, len) = (off as u32, buf.len() as u32);
        // SAFETY: as in `read`.
        unsafe { b::msvm_page_write(self.page.as_ptr(), off, buf.as_ptr().cast(), len) };
    }

    /// Atomically adds `value` to the `u64` at `off` (8-byte aligned).
    pub(crate) fn add_u64(&self, off: usize, value: u64) {
        assert!(off % 8 == 0 && off + 8 <= PAGE_SIZE);
        // CAST: below `PAGE_SIZE` (asserted), which fits in `u32`.
        let off = off as u32;
        // SAFETY: aligned and in bounds (asserted); the page is valid and
        // in the direct map, as in `read`.
        unsafe { b::msvm_page_add_u64(self.page.as_ptr(), off, value) };
    }
}
