// SPDX-License-Identifier: GPL-2.0

//! Mappings of a peer device's memory for P2P access: what a device uses
//! to reach a page of another device's BAR, by the way `pci_p2pdma` says
//! it goes ([`PeerRoute`], from the page and the device, as
//! `WcBar::peer_route` makes it).

use core::marker::PhantomData;

use kernel::{bindings, device, device::Bound};

use super::dma::mapped;
use super::page::{PageRef, PAGE_SIZE};
use super::pagemap::PeerAddr;
use super::pci::P2pPath;
use super::rawdev::raw;

/// How one device reaches a peer's device page: the page's own bus-side
/// address ([`PeerAddr`]) and the path `pci_p2pdma` gives that device to
/// the page's BAR ([`P2pPath`]), decided when the route is made, while
/// the BAR is live (`WcBar::peer_route`), for that device alone.
///
/// # Invariants
///
/// - `client` is the `struct device` the route was made for;
/// - `via` is the path `pci_p2pdma` decides for `client` and the BAR
///   `peer` is a page of, with `Via::Bus` holding the page's PCI bus
///   address (`pci_p2pdma_bus_addr_map` of `peer`'s physical address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PeerRoute<'a> {
    peer: PeerAddr<'a>,
    client: *const bindings::device,
    via: Via,
}

/// The way a [`PeerRoute`] goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// Inside a switch, at this PCI bus address: no mapping.
    Bus(u64),
    /// Through the host bridge: `dma_map_resource` of the physical address.
    HostBridge,
}

impl<'a> PeerRoute<'a> {
    /// The route of `client` to `peer` along `path`, with `bus` the page's
    /// PCI bus address: `None` for [`P2pPath::None`].
    ///
    /// # Safety
    ///
    /// `path` is the path `pci_p2pdma` decides for `client` and the
    /// BAR `peer` is a page of, and `bus` is `peer`'s PCI bus address.
    pub(super) unsafe fn new(
        peer: PeerAddr<'a>,
        client: &device::Device,
        path: P2pPath,
        bus: u64,
    ) -> Option<Self> {
        let via = match path {
            P2pPath::Bus => Via::Bus(bus),
            P2pPath::HostBridge => Via::HostBridge,
            P2pPath::None => return None,
        };
        // INVARIANT: the caller's promise.
        Some(Self {
            peer,
            client: raw(client),
            via,
        })
    }

    /// Whether this is `page`'s route (made of the address its map gives it).
    pub(super) fn is_of(&self, page: PageRef<'_>) -> bool {
        self.peer.is_of(page)
    }
}

/// A page of a peer device's memory (a piece of its BAR) mapped for P2P
/// access by one device, unmapped on drop.
///
/// How the device reaches the page is its [`PeerRoute`]'s: inside a
/// switch at the page's bus address, with nothing to map, or through the
/// host bridge, `dma_map_resource` of the page's physical address (what
/// upstream's drm_pagemap does for every peer).
///
/// # Invariants
///
/// `addr` is the address `dev` reaches the page of a [`PeerRoute`] valid
/// for `'a`, made for `dev`, at: its bus address, or a live mapping for
/// `dev` made by [`map_peer`] if `mapped`.
pub(crate) struct PeerMap<'a> {
    dev: &'a device::Device<Bound>,
    addr: PeerMapping,
    /// The peer's page, which the mapping stands for: no `PeerMap`
    /// outlives it (as a [`DmaPage`](super::dma::DmaPage) does not
    /// outlive its page).
    _page: PhantomData<PeerAddr<'a>>,
}

impl<'a> PeerMap<'a> {
    /// Maps the peer memory `route` leads to for `dev`, for as long as
    /// both the device's borrow and the page's last. `None` if the route
    /// was made for another device, or the mapping failed.
    pub(crate) fn map(dev: &'a device::Device<Bound>, route: PeerRoute<'a>) -> Option<Self> {
        let addr = map_peer(dev, route)?;
        // INVARIANT: made for `dev` just now, of `route`'s page, valid
        // for `'a`.
        Some(Self {
            dev,
            addr,
            _page: PhantomData,
        })
    }

    /// The address the device reaches the peer page at.
    pub(crate) fn addr(&self) -> u64 {
        self.addr.addr
    }
}

impl Drop for PeerMap<'_> {
    fn drop(&mut self) {
        // SAFETY: made by `map_peer` for `dev` (invariant), dropped once.
        unsafe { unmap_peer(self.dev, self.addr) };
    }
}

/// Where a device reaches a peer page: [`map_peer`]'s result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PeerMapping {
    /// The address the device uses.
    pub(super) addr: u64,
    /// Whether it is a DMA mapping ([`unmap_peer`] unmaps it), not a bus
    /// address.
    pub(super) mapped: bool,
}

impl PeerMapping {
    /// A DMA mapping at `addr`.
    pub(super) fn dma(addr: u64) -> Self {
        Self { addr, mapped: true }
    }
}

/// Maps the peer memory `route` leads to for `dev` (as [`PeerMap::map`]
/// says): the address `dev` reaches it at, which [`unmap_peer`] must let
/// go of. `None` if `route` was made for another device, or the DMA
/// mapping failed.
pub(super) fn map_peer(dev: &device::Device<Bound>, route: PeerRoute<'_>) -> Option<PeerMapping> {
    if route.client != raw(dev).cast_const() {
        return None;
    }
    match route.via {
        // A switch routes the bus address itself: nothing to map, nothing
        // the IOMMU sees (`pci_p2pdma` says the device reaches it so).
        Via::Bus(addr) => Some(PeerMapping {
            addr,
            mapped: false,
        }),
        Via::HostBridge => {
            // SAFETY: `dev` is live (the borrow). Mapping an address is no
            // access: what the mapping reaches is the user's business
            // (`PeerMap`, the device page table keep the peer's page in
            // place while they use it).
            let addr = unsafe {
                bindings::dma_map_resource(
                    raw(dev),
                    route.peer.phys(),
                    PAGE_SIZE,
                    bindings::dma_data_direction::DMA_BIDIRECTIONAL,
                    0,
                )
            };
            mapped(dev, addr).then(|| PeerMapping::dma(addr))
        }
    }
}

/// Lets go of what [`map_peer`] made: unmaps a DMA mapping; a bus
/// address needs nothing.
///
/// # Safety
///
/// `m` is what [`map_peer`] made for `dev`, not let go of yet.
pub(super) unsafe fn unmap_peer(dev: &device::Device, m: PeerMapping) {
    if !m.mapped {
        return;
    }
    // SAFETY: a live mapping for `dev` (the caller's promise).
    unsafe {
        bindings::dma_unmap_resource(
            raw(dev),
            m.addr,
            PAGE_SIZE,
            bindings::dma_data_direction::DMA_BIDIRECTIONAL,
            0,
        )
    };
}
