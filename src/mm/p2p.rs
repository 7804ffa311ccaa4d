// SPDX-License-Identifier: GPL-2.0

//! Mappings of a peer device's memory for P2P access: what a device uses
//! to reach a page of another device's BAR, by the bus-side address the
//! page itself stands for ([`PeerAddr`], from its pagemap).

use core::marker::PhantomData;

use kernel::{bindings, device, device::Bound};

use super::dma::mapped;
use super::page::PAGE_SIZE;
use super::pagemap::PeerAddr;
use super::rawdev::raw;

/// A page of a peer device's memory (a piece of its BAR) mapped for P2P
/// access by one device, unmapped on drop.
///
/// This is the one place that decides how a device reaches a peer's
/// memory: today `dma_map_resource` of the peer's BAR (what upstream's
/// drm_pagemap does); P2P pages of a published `pci_p2pdma` region would fit
/// behind the same type. What it maps comes from the peer's page itself
/// ([`PeerAddr`]): the bus-side address that page stands for (its page of
/// the peer's BAR), no other address.
///
/// # Invariants
///
/// `addr` is a live mapping for `dev` of the bus-side address of a device
/// page valid for `'a` (a [`PeerAddr`]), made by [`map_peer`].
pub(crate) struct PeerMap<'a> {
    dev: &'a device::Device<Bound>,
    addr: u64,
    /// The peer's page, which the mapping stands for: no `PeerMap`
    /// outlives it (as a [`DmaPage`](super::dma::DmaPage) does not
    /// outlive its page).
    _page: PhantomData<PeerAddr<'a>>,
}

impl<'a> PeerMap<'a> {
    /// Maps the peer memory behind device page `peer` for `dev`, for as
    /// long as both the device's borrow and the page's last.
    pub(crate) fn map(dev: &'a device::Device<Bound>, peer: PeerAddr<'a>) -> Option<Self> {
        let addr = map_peer(dev, peer)?;
        // INVARIANT: `addr` is the mapping of `peer`, valid for `'a`, for
        // `dev` just made.
        Some(Self {
            dev,
            addr,
            _page: PhantomData,
        })
    }

    /// The device-visible (bus) address of the peer page.
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }
}

impl Drop for PeerMap<'_> {
    fn drop(&mut self) {
        // SAFETY: a live mapping for `dev` (invariant), dropped once.
        unsafe { unmap_peer(self.dev, self.addr) };
    }
}

/// Maps the peer memory behind device page `peer` (the bus-side address it
/// stands for) for `dev` (as [`PeerMap::map`] says): its bus address, which
/// [`unmap_peer`] must unmap.
pub(super) fn map_peer(dev: &device::Device<Bound>, peer: PeerAddr<'_>) -> Option<u64> {
    // SAFETY: `dev` is live (the borrow). Mapping an address is no access:
    // what the mapping reaches is the user's business (`PeerMap`, the
    // device page table keep the peer's page in place while they use it).
    let addr = unsafe {
        bindings::dma_map_resource(
            raw(dev),
            peer.phys(),
            PAGE_SIZE,
            bindings::dma_data_direction::DMA_BIDIRECTIONAL,
            0,
        )
    };
    mapped(dev, addr).then_some(addr)
}

/// Unmaps a mapping [`map_peer`] made.
///
/// # Safety
///
/// `addr` is a live mapping [`map_peer`] made for `dev`, not unmapped yet.
pub(super) unsafe fn unmap_peer(dev: &device::Device, addr: u64) {
    // SAFETY: a live mapping for `dev` (the caller's promise).
    unsafe {
        bindings::dma_unmap_resource(
            raw(dev),
            addr,
            PAGE_SIZE,
            bindings::dma_data_direction::DMA_BIDIRECTIONAL,
            0,
        )
    };
}
