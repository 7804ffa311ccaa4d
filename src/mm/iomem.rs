// SPDX-License-Identifier: GPL-2.0

//! A write-combined mapping of a PCI memory BAR: the CPU's window onto a
//! device's VRAM.
//!
//! `kernel::pci` maps BARs uncached (`ioremap`), which is right for registers
//! and about ten times too slow for bulk copies into device memory. VRAM is
//! mapped write-combined here, as GPU drivers map their aperture.

use core::ffi::c_void;
use core::ptr::NonNull;

use kernel::{
    device::{self, Bound},
    devres::Devres,
    num::casts::FromSafeCast,
    pci,
    prelude::*,
    sync::aref::ARef,
};

use super::bindings as b;
use super::dma::DmaPage;
use super::p2p::PeerRoute;
use super::page::{NewPage, PageRef, PAGE_SIZE};
use super::pagemap::{BusRange, BusSide, Pagemap, PagemapOps};
use super::pci::{self as mmpci, raw_pci_dev, PathCache};

/// A BAR of a bound PCI device, requested for exclusive use and mapped
/// write-combined. It only ever exists inside a [`Devres`] ([`WcBar::new`]):
/// it is reached through that while the device is bound, and dropped, its
/// region released, when the device is unbound (or the `Devres` goes first).
///
/// # Invariants
///
/// - `base` is the `pci_iomap_wc()` mapping of the first `len` bytes of BAR
///   `bar` of `pdev`, and the region is requested by us (`pci_request_region`);
///   both are released on drop;
/// - `phys` is the CPU physical address of BAR `bar` (its resource's
///   start) for as long as the region is ours (`WcBar::bus_range` gives
///   it to pagemaps' ranges);
/// - `bus_offset` is what BAR `bar` adds to a CPU physical address in it
///   to make its PCI bus address;
/// - `pdev` is bound to its driver whenever a `WcBar` can be reached: it
///   lives in a `Devres` of `pdev`, revoked (and the `WcBar` dropped) before
///   `pdev` is unbound.
pub(crate) struct WcBar {
    pdev: ARef<pci::Device>,
    bar: i32,
    /// CPU physical address of the BAR (the resource start).
    phys: u64,
    /// What the BAR adds to a CPU physical address in it to make its PCI
    /// bus address.
    bus_offset: u64,
    /// Each client's path to the BAR, as `pci_p2pdma` decides it
    /// ([`Self::peer_route`]).
    paths: PathCache,
    base: NonNull<c_void>,
    len: usize,
}

// SAFETY: the mapping is plain MMIO: any thread may access it, and all
// accesses go through `memcpy_{to,from}io` on disjoint or racy-but-defined
// device memory (no Rust references into it are ever created).
unsafe impl Send for WcBar {}
// SAFETY: see `Send`; `&WcBar` only offers copies in and out.
unsafe impl Sync for WcBar {}

impl WcBar {
    /// Requests BAR `bar` of `pdev` under `name` and maps its first
    /// `max_len` bytes (all of it if it is smaller) write-combined, for as
    /// long as `pdev` is bound (or the returned `Devres` lives).
    pub(crate) fn new(
        pdev: &pci::Device<Bound>,
        bar: u32,
        max_len: usize,
        name: &'static CStr,
    ) -> Result<Devres<Self>> {
        let len = usize::try_from(pdev.resource_len(bar)?)?.min(max_len);
        let phys = pdev.resource_start(bar)?;
        let bus_offset = mmpci::bar_bus_offset(pdev, bar)?;
        if len == 0 {
            return Err(ENODEV);
        }
        let bar_i = i32::try_from(bar)?;
        let raw = raw_pci_dev(pdev);
        // SAFETY: `raw` is a valid, bound `struct pci_dev`; `name` is a
        // NUL-terminated string that outlives the region (it is `'static`).
        kernel::error::to_result(unsafe { b::pci_request_region(raw, bar_i, name.as_char_ptr()) })?;
        // SAFETY: as above; BAR `bar` exists (its length is not zero) and is
        // now ours; `len` is at most its length.
        let base = unsafe { b::pci_iomap_wc(raw, bar_i, len) };
        let Some(base) = NonNull::new(base) else {
            // SAFETY: we requested this region just above.
            unsafe { b::pci_release_region(raw, bar_i) };
            return Err(ENOMEM);
        };
        // INVARIANT: mapped and requested above, for `len` bytes; `phys`
        // is the BAR's start, read above from the bound device's resource,
        // which the region requested keeps where it is (no BAR of a device
        // with a driver is moved) until it is released on drop; from here
        // on the `Devres` holds it (and drops it if it cannot be made);
        // `bus_offset` is the BAR's, from the bound device.
        let this = Self {
            pdev: ARef::from(&**pdev),
            bar: bar_i,
            phys,
            bus_offset,
            paths: PathCache::new(),
            base,
            len,
        };
        Devres::new(pdev.as_ref(), this)
    }

    /// The device, bound.
    fn bound(&self) -> &device::Device<Bound> {
        let dev: &device::Device = self.pdev.as_ref();
        // SAFETY: the device is bound while its `WcBar` can be reached (type
        // invariant).
        unsafe { dev.as_bound() }
    }

    /// The `len` bytes at `offset` of the BAR (both page aligned), by
    /// their offset and their CPU physical addresses at once: what a
    /// pagemap of the device memory there is made with
    /// (`super::pagemap::Pagemap::new`), which its owner's CPU side finds
    /// its pages' offsets from, and a peer its pages' bus-side addresses
    /// ([`Self::peer_route`]). `ERANGE` unless the range lies in the BAR,
    /// `EINVAL` unless it is page aligned (the BAR too).
    pub(crate) fn bus_range(&self, offset: usize, len: usize) -> Result<BusRange> {
        self.check(offset, len)?;
        let aligned = self.phys % u64::from_safe_cast(PAGE_SIZE) == 0;
        if !aligned || offset % PAGE_SIZE != 0 || len % PAGE_SIZE != 0 {
            return Err(EINVAL);
        }
        // SAFETY: `phys`, `offset` and `len` are page aligned (checked
        // above), so is their sum; the range lies in the BAR (checked
        // above), whose CPU physical address is `phys` for as long as this
        // `WcBar` lives (type invariant: its region is ours until it is
        // dropped).
        Ok(unsafe { BusRange::new(self.phys + u64::from_safe_cast(offset), offset, len) })
    }

    /// How `client` reaches `page`, a page of `map`, whose pages stand
    /// for a range of this BAR: the page's bus-side address and the path
    /// `pci_p2pdma` gives `client` to this BAR ([`PeerRoute`]). `EINVAL`
    /// for a page of another map, or if `map` stands for no range of this
    /// BAR (none, or another BAR's); `EREMOTEIO` if `pci_p2pdma` gives
    /// `client` no path. A path is decided at the client's first route to
    /// the BAR and kept with it, as `pci_p2pdma` keeps its own
    /// ([`PathCache`]); no path is decided again each time. The
    /// BAR is live while the caller holds it (a `WcBar` is reached only
    /// while its device is bound): so is the address when it is made, and
    /// no longer (what keeps the BAR in place after:
    /// [`PeerAddr`](super::pagemap::PeerAddr)).
    pub(crate) fn peer_route<'a, T: PagemapOps>(
        &self,
        map: &Pagemap<T>,
        page: PageRef<'a>,
        client: &device::Device<Bound>,
    ) -> Result<PeerRoute<'a>> {
        map.bus()
            .range()
            .filter(|r| r.is_in(self.phys, self.len))
            .ok_or(EINVAL)?;
        // SAFETY: the range lies in this BAR (checked just above), live
        // while `self` is borrowed (type invariant).
        let peer = unsafe { map.peer_addr(page) }.ok_or(EINVAL)?;
        let path = self.paths.path(&self.pdev, client);
        let bus = peer.phys().wrapping_add(self.bus_offset);
        // SAFETY: `path` is what `pci_p2pdma` decides for `client` and
        // this BAR's device, the BAR `peer` is a page of (checked above),
        // and `bus` its bus address there (type invariant).
        unsafe { PeerRoute::new(peer, client, path, bus) }.ok_or(EREMOTEIO)
    }

    /// Copies the page at `src_off` of `src` (another device's BAR) to
    /// `offset` of this one, through `stage`: a device-to-device copy.
    pub(crate) fn copy_from_bar(
        &self,
        offset: usize,
        src: &WcBar,
        src_off: usize,
        stage: &mut [u8; PAGE_SIZE],
    ) -> Result {
        src.read(src_off, stage)?;
        self.write(offset, stage)
    }

    /// Bytes mapped (the BAR's first, at most all of it).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Fails with `ERANGE` unless `[offset, offset + count)` lies in the BAR.
    fn check(&self, offset: usize, count: usize) -> Result {
        match offset.checked_add(count) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(ERANGE),
        }
    }

    /// Copies `dst.len()` bytes of the BAR at `offset` into `dst`.
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) -> Result {
        self.check(offset, dst.len())?;
        // SAFETY: the source range lies within the mapping (checked above,
        // type invariant); `dst` is a valid, exclusively borrowed buffer.
        unsafe {
            b::memcpy_fromio(
                dst.as_mut_ptr().cast(),
                self.base.as_ptr().cast::<u8>().add(offset).cast(),
                dst.len(),
            )
        };
        Ok(())
    }

    /// Copies `src` into the BAR at `offset`.
    pub(crate) fn write(&self, offset: usize, src: &[u8]) -> Result {
        self.check(offset, src.len())?;
        // SAFETY: the destination range lies within the mapping (checked
        // above, type invariant); `src` is a valid buffer.
        unsafe {
            b::memcpy_toio(
                self.base.as_ptr().cast::<u8>().add(offset).cast(),
                src.as_ptr().cast(),
                src.len(),
            )
        };
        Ok(())
    }
}

impl WcBar {
    /// Address of `offset` in the mapping, for a page-sized access.
    fn page_io(&self, offset: usize) -> Result<*mut c_void> {
        self.check(offset, PAGE_SIZE)?;
        // SAFETY: in bounds (checked above, type invariant).
        Ok(unsafe { self.base.as_ptr().cast::<u8>().add(offset) }.cast())
    }

    /// Copies system page `page` into the BAR at `offset`, the way the
    /// device's copy engine reaches system RAM: through a DMA mapping of
    /// the page for the device, made for the copy and unmapped after it
    /// (`ENOMEM` if the page cannot be mapped).
    pub(crate) fn copy_from_page(&self, offset: usize, page: PageRef<'_>) -> Result {
        let dst = self.page_io(offset)?;
        let map = DmaPage::map(self.bound(), page).ok_or(ENOMEM)?;
        // SAFETY: `dst` is a page inside the mapping; the DMA address maps
        // `map.page()`, valid for the caller's migration.
        unsafe { b::msvm_copy_page_to_io(dst, map.page().as_ptr()) };
        Ok(())
    }

    /// Copies the page of the BAR at `offset` into page `k` of `dst`, a
    /// system folio of ours (a migration destination: nobody else reads or
    /// writes it), through a DMA mapping of it (see
    /// [`Self::copy_from_page`]); `EINVAL` if the folio has no page `k`.
    pub(crate) fn copy_to_page(&self, offset: usize, dst: &NewPage, k: usize) -> Result {
        let src = self.page_io(offset)?;
        let page = dst.page().nth(k).ok_or(EINVAL)?;
        let map = DmaPage::map(self.bound(), page).ok_or(ENOMEM)?;
        // SAFETY: as in `copy_from_page`.
        unsafe { b::msvm_copy_io_to_page(map.page().as_ptr(), src) };
        Ok(())
    }

    /// Zeroes the page of the BAR at `offset`.
    pub(crate) fn clear_page(&self, offset: usize) -> Result {
        let dst = self.page_io(offset)?;
        // SAFETY: `dst` is a page inside the mapping.
        unsafe { b::memset_io(dst, 0, PAGE_SIZE) };
        Ok(())
    }
}

impl Drop for WcBar {
    fn drop(&mut self) {
        let raw = raw_pci_dev(&self.pdev);
        // SAFETY: by the type invariant `base` is our live mapping of BAR
        // `bar` and the region is ours; neither is used after this.
        unsafe {
            b::pci_iounmap(raw, self.base.as_ptr());
            b::pci_release_region(raw, self.bar);
        }
    }
}
