// SPDX-License-Identifier: GPL-2.0

//! Streaming DMA mappings of system pages for a device: what a device uses
//! to reach system RAM.

use kernel::{
    bindings, device,
    device::Bound,
    num::casts::FromSafeCast,
    sync::atomic::{Atomic, Relaxed},
};

use super::bindings as b;
use super::page::{PageRef, PAGE_SIZE};
use super::rawdev::raw;

/// A page mapped for DMA by one device (bidirectional, one page, no CPU
/// sync at either end: see [`DmaPage::map`]), unmapped on drop.
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
    ///
    /// The mapping is for the emulated device: it reaches the page itself
    /// through the kernel's mapping (its address decoder resolves a DMA
    /// address to the page it maps, as an IOMMU walk would), never a bounce
    /// buffer behind the address. So no CPU sync is due at unmap
    /// (`DMA_ATTR_SKIP_CPU_SYNC`): there, with bounce buffers
    /// (`swiotlb=force`, SEV/TDX guests), the copy back would write the
    /// stale bounce buffer over what the device wrote into the page.
    /// (swiotlb still copies the page into the bounce buffer at map,
    /// whatever the attribute says; nothing reads that copy.)
    pub(crate) fn map(dev: &'a device::Device<Bound>, page: PageRef<'a>) -> Option<Self> {
        let addr = map_page(dev, page)?;
        // INVARIANT: `addr` is the mapping of `page` for `dev` just made.
        Some(Self { dev, page, addr })
    }

    /// The device-visible address of the page.
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }

    /// The page.
    pub(crate) fn page(&self) -> PageRef<'a> {
        self.page
    }

    /// The page, for the engine's accesses.
    pub(crate) fn sys(&self) -> SysPage<'a> {
        // INVARIANT: `map` mapped only a system page in the direct map,
        // valid for `'a`.
        SysPage { page: self.page }
    }
}

impl Drop for DmaPage<'_> {
    fn drop(&mut self) {
        // SAFETY: a live mapping for `dev` (invariant), dropped once.
        unsafe { unmap_page(self.dev, self.addr) };
    }
}

/// Maps `page`, a system page, for `dev` (as [`DmaPage::map`] says): its
/// DMA address, which [`unmap_page`] must unmap; `None` if it cannot be
/// mapped or the kernel must not touch it.
pub(super) fn map_page(dev: &device::Device<Bound>, page: PageRef<'_>) -> Option<u64> {
    if page.is_device_private() || page.is_secretmem() {
        return None;
    }
    // SAFETY: `dev` is a live device (the borrow) and `page` a valid page;
    // one page from offset 0 is inside it.
    let addr = unsafe {
        bindings::dma_map_page_attrs(
            raw(dev),
            page.as_ptr(),
            0,
            PAGE_SIZE,
            bindings::dma_data_direction::DMA_BIDIRECTIONAL,
            // No CPU sync, at map or unmap: see `DmaPage::map`. A device
            // page table's DMA entries, which msvm-gpu's job engine reaches
            // by DMA itself, are never made when the device's mappings
            // bounce (`force_bounce`: `DevPt::set`), and x86's DMA is
            // cache-coherent: nothing is left to sync there either.
            usize::from_safe_cast(bindings::DMA_ATTR_SKIP_CPU_SYNC),
        )
    };
    mapped(dev, addr).then_some(addr)
}

/// Unmaps a mapping [`map_page`] made.
///
/// # Safety
///
/// `addr` is a live mapping [`map_page`] made for `dev`, not unmapped yet.
pub(super) unsafe fn unmap_page(dev: &device::Device, addr: u64) {
    // SAFETY: a live mapping for `dev` (the caller's promise).
    unsafe {
        bindings::dma_unmap_page_attrs(
            raw(dev),
            addr,
            PAGE_SIZE,
            bindings::dma_data_direction::DMA_BIDIRECTIONAL,
            // As mapped.
            usize::from_safe_cast(bindings::DMA_ATTR_SKIP_CPU_SYNC),
        )
    };
}

/// Which way a device's own DMA moves a page's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// The device reads the page.
    ToDevice,
    /// The device writes the page.
    FromDevice,
}

impl Direction {
    fn raw(self) -> bindings::dma_data_direction {
        match self {
            Self::ToDevice => bindings::dma_data_direction::DMA_TO_DEVICE,
            Self::FromDevice => bindings::dma_data_direction::DMA_FROM_DEVICE,
        }
    }
}

/// A system page mapped one way for a device that reaches it by DMA of its
/// own (msvm-gpu's copy engine), unmapped on drop. Unlike [`DmaPage`]
/// (the emulated CPU engine, which reaches the page itself), the mapping
/// makes the CPU syncs of the DMA API: a bounce buffer behind the address
/// (`swiotlb=force`, SEV/TDX guests) is filled from the page at map
/// ([`Direction::ToDevice`]), or copied into it at unmap
/// ([`Direction::FromDevice`]). The device must be done with the address
/// before the mapping is dropped.
///
/// # Invariants
///
/// `addr` is a live `dma_map_page` mapping of one page for `dev`, made
/// with direction `dir`.
pub(crate) struct DeviceDma<'a> {
    dev: &'a device::Device<Bound>,
    addr: u64,
    dir: Direction,
}

impl<'a> DeviceDma<'a> {
    /// Maps `page`, a system page in the direct map, for `dev`, the way
    /// `dir` says; `None` if it cannot be mapped or is not such a page.
    pub(crate) fn map(
        dev: &'a device::Device<Bound>,
        page: PageRef<'a>,
        dir: Direction,
    ) -> Option<Self> {
        if page.is_device_private() || page.is_secretmem() {
            return None;
        }
        // SAFETY: `dev` is a live device (the borrow) and `page` a valid
        // page; one page from offset 0 is inside it.
        let addr = unsafe {
            bindings::dma_map_page_attrs(raw(dev), page.as_ptr(), 0, PAGE_SIZE, dir.raw(), 0)
        };
        if !mapped(dev, addr) {
            return None;
        }
        // INVARIANT: the mapping just made.
        Some(Self { dev, addr, dir })
    }

    /// The device-visible address of the page.
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }
}

impl Drop for DeviceDma<'_> {
    fn drop(&mut self) {
        // SAFETY: a live mapping for `dev` with direction `dir`
        // (invariant), unmapped once.
        unsafe {
            bindings::dma_unmap_page_attrs(raw(self.dev), self.addr, PAGE_SIZE, self.dir.raw(), 0)
        };
    }
}

/// Whether every streaming mapping for `dev` goes through a bounce buffer
/// (`swiotlb=force`, SEV/TDX guests): a pool shared by all devices, which
/// long-lived mappings must not hold.
pub(super) fn force_bounce(dev: &device::Device) -> bool {
    // SAFETY: `dev` is a live device (the borrow); the call reads a field.
    unsafe { b::msvm_dma_force_bounce(raw(dev)) }
}

/// Whether `addr`, just returned by a `dma_map_*` call for `dev`, is a
/// mapping rather than the error value (`dma_mapping_error`, which also
/// tells `CONFIG_DMA_API_DEBUG` that the result was checked).
pub(super) fn mapped(dev: &device::Device, addr: u64) -> bool {
    // SAFETY: `dev` is a live device (the borrow); the call only compares
    // `addr` (and records the check for DMA API debugging).
    unsafe { b::msvm_dma_mapping_error(raw(dev), addr) == 0 }
}

/// CPU access to the mapped page: the emulated device's accesses to system
/// RAM, which reach the page itself (the decoder resolves the DMA address
/// to the page it maps, as an IOMMU walk would; see [`DmaPage::map`]:
/// no bounce buffer is ever synced over it).
///
/// The page is shared, by design, with user space and with the engines of
/// other devices, which may read and write it at the same time. So the
/// copies are C's `memcpy` (`msvm_page_read`, `msvm_page_write`), whose
/// races with those accesses the kernel's memory model tolerates, as for
/// any user page the kernel copies; in Rust a plain copy racing with a
/// write is undefined behaviour (which is why `kernel::page`'s
/// `read_raw`/`write_raw` make their callers rule out races, as these
/// methods cannot). The add is an atomic access, race-free, so it is Rust.
///
/// # Invariants
///
/// `page` is a valid system page for `'a` (not device-private), in the
/// direct map (not secretmem).
#[derive(Clone, Copy)]
pub(crate) struct SysPage<'a> {
    page: PageRef<'a>,
}

impl<'a> SysPage<'a> {
    /// `page`, if it is a system page in the direct map; it must be mapped
    /// for DMA by whoever hands it to the engine.
    pub(super) fn new(page: PageRef<'a>) -> Option<Self> {
        // INVARIANT: checked here; valid for `'a` (the `PageRef`'s).
        (!page.is_device_private() && !page.is_secretmem()).then_some(Self { page })
    }

    /// The device may have written the page through a mapping of its PTE
    /// that the walk found writable: a swap-backed page (anonymous, shmem)
    /// is marked dirty, so that reclaim does not drop it as clean (after
    /// `MADV_FREE`, or in a shared shmem mapping, a writable PTE may be
    /// clean, and a write by DMA does not dirty it). Meant for a page still
    /// mapped where a valid walk or entry found it (under the mirror's
    /// lock), which cannot be truncated meanwhile; anywhere else it only
    /// sets the flag of a folio whose dirty hook does nothing more.
    pub(crate) fn written(&self) {
        // SAFETY: the page is a valid system page (invariant).
        unsafe { b::msvm_page_written(self.page.as_ptr()) };
    }

    /// Copies `buf.len()` bytes at `off` of the page into `buf`.
    pub(crate) fn read(&self, off: usize, buf: &mut [u8]) {
        assert!(off + buf.len() <= PAGE_SIZE);
        // CAST: both at most `PAGE_SIZE` (asserted), which fits in `u32`.
        let (off, len) = (off as u32, buf.len() as u32);
        // SAFETY: in bounds (asserted); the page is a valid system page in
        // the direct map (invariant).
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

    /// Atomically adds `value` to the `u64` at `off` (8-byte aligned), as
    /// `atomic64_add` (relaxed, wrapping).
    pub(crate) fn add_u64(&self, off: usize, value: u64) {
        assert!(off % 8 == 0 && off + 8 <= PAGE_SIZE);
        // SAFETY: the page is a valid system page in the direct map
        // (invariant).
        let base = unsafe { bindings::kmap_local_page(self.page.as_ptr()) };
        // SAFETY: `base` maps the whole page and is page aligned, so `off`
        // (8-byte aligned and the word in bounds, asserted) gives an aligned
        // `u64` that stays mapped until `kunmap_local` below, after the
        // last use of the reference. The word is shared memory: other
        // accesses may race with this one, but none from Rust code: the
        // kernel's are atomics too or copies in C (`msvm_page_read`,
        // `msvm_page_write`, the BAR copies, as every kernel copy of a user
        // page), and user space's are outside this program.
        unsafe { Atomic::from_ptr(base.cast::<u8>().add(off).cast::<u64>()) }.add(value, Relaxed);
        // SAFETY: `base` is the local mapping made above, the last one this
        // task made that is still live (local mappings nest).
        unsafe { bindings::kunmap_local(base) };
    }
}
