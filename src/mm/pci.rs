// SPDX-License-Identifier: GPL-2.0

//! PCI helpers the `kernel::pci` abstraction does not offer: the PCI domain,
//! the kind of a BAR, dynamic ids, and PCIe peer-to-peer paths as
//! `pci_p2pdma` decides them ([`P2pLink`]).

use kernel::sync::atomic::{Atomic, Relaxed};

use kernel::{
    bindings, device, error::to_result, num::casts::FromSafeCast, pci, prelude::*, str::CStr,
};

use super::bindings as b;

/// The raw `struct pci_dev` behind a [`pci::Device`].
///
/// `pci::Device` is `#[repr(transparent)]` over `Opaque<bindings::pci_dev>`
/// (its documented layout), so the cast yields the C object, valid for as long
/// as the reference is.
pub(super) fn raw_pci_dev<Ctx: device::DeviceContext>(
    pdev: &pci::Device<Ctx>,
) -> *mut bindings::pci_dev {
    core::ptr::from_ref(pdev)
        .cast::<bindings::pci_dev>()
        .cast_mut()
}

/// The raw `struct device` behind a [`pci::Device`]: the `dev` member of the
/// `struct pci_dev`.
fn raw_dev<Ctx: device::DeviceContext>(pdev: &pci::Device<Ctx>) -> *mut bindings::device {
    let dev: &device::Device<Ctx> = pdev.as_ref();
    // `device::Device` is `#[repr(transparent)]` over `Opaque<bindings::device>`.
    core::ptr::from_ref(dev)
        .cast::<bindings::device>()
        .cast_mut()
}

/// The PCI domain (segment) number of `pdev`.
pub(crate) fn domain_nr<Ctx: device::DeviceContext>(pdev: &pci::Device<Ctx>) -> u32 {
    // SAFETY: `raw(pdev)` is a valid `struct pci_dev` for the duration of the
    // call (see `raw_pci_dev`), and a device always has a bus.
    let nr = unsafe { b::msvm_pci_domain_nr(raw_pci_dev(pdev)) };
    // CAST: domain numbers are never negative on the architectures msvm supports.
    nr as u32
}

/// How a client device reaches a provider's memory over PCIe
/// peer-to-peer, as `pci_p2pdma` decides it (its map type: [`decide`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum P2pPath {
    /// Inside a switch, by the memory's PCI bus address, with no IOMMU
    /// mapping (`PCI_P2PDMA_MAP_BUS_ADDR`).
    Bus,
    /// Through the host bridge: the memory mapped for the client like any
    /// other DMA, through its IOMMU if it has one (`dma_map_resource`,
    /// `PCI_P2PDMA_MAP_THRU_HOST_BRIDGE`).
    HostBridge,
    /// No P2P path (`PCI_P2PDMA_MAP_NOT_SUPPORTED`): data goes through
    /// system memory.
    None,
}

/// Why `pci_p2pdma` decides a pair's [`P2pPath`] as it does (the walk of
/// its `calc_map_type_and_dist`): a pair that meets at a common upstream
/// bridge with no ACS redirect on the way goes inside the switch; any
/// other goes through the host bridge if the host bridge is whitelisted
/// (or the CPU routes P2P: AMD Zen), or has no path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct P2pWhy {
    /// The two devices meet at an upstream bridge below the host bridge (a
    /// switch).
    pub(crate) common_bridge: bool,
    /// A port on the path between them has ACS redirect on.
    pub(crate) acs_redirect: bool,
}

/// A client's P2P link to a provider's memory: its path, `pci_p2pdma`'s
/// distance and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct P2pLink {
    /// The path.
    pub(crate) path: P2pPath,
    /// `pci_p2pdma`'s distance (hops), `None` with no path.
    pub(crate) distance: Option<u32>,
    /// Why.
    pub(crate) why: P2pWhy,
}

impl P2pLink {
    /// No P2P link (no path, for no reason known).
    pub(crate) const NONE: Self = Self {
        path: P2pPath::None,
        distance: None,
        why: P2pWhy {
            common_bridge: false,
            acs_redirect: false,
        },
    };

    /// Whether there is a P2P path.
    pub(crate) fn reaches(&self) -> bool {
        self.path != P2pPath::None
    }
}

/// The P2P link of `client` to `provider`'s memory, as `pci_p2pdma`
/// decides it: whether there is a path and its distance
/// (`pci_p2pdma_distance_many`), and which (Linux 7.3 does not export its
/// `pci_p2pdma_map_type`: the walk of `msvm_pci_p2p_why`, the same as
/// its `calc_map_type_and_dist`, tells a path inside the switch, with a
/// common bridge and no ACS redirect, from one through the host bridge).
fn decide(provider: *mut b::pci_dev, client: *mut bindings::device) -> P2pLink {
    let mut clients = [client];
    // SAFETY: both devices are valid for the duration of the call (the
    // callers' borrows); `clients` is an array of one valid
    // `struct device *`, which the function only reads.
    let dist = unsafe { b::pci_p2pdma_distance_many(provider, clients.as_mut_ptr(), 1, false) };
    // SAFETY: as above; the walk only reads the two devices, their
    // upstream bridges (which they hold) and their config spaces.
    let why = unsafe { b::msvm_pci_p2p_why(provider, client) };
    let why = P2pWhy {
        common_bridge: why & b::MSVM_P2P_WHY_COMMON_BRIDGE != 0,
        acs_redirect: why & b::MSVM_P2P_WHY_ACS_REDIRECT != 0,
    };
    let distance = u32::try_from(dist).ok();
    let path = match distance {
        None => P2pPath::None,
        Some(_) if why.common_bridge && !why.acs_redirect => P2pPath::Bus,
        Some(_) => P2pPath::HostBridge,
    };
    P2pLink {
        path,
        distance,
        why,
    }
}

/// The P2P link of `client` to `provider`'s memory (see [`decide`]).
pub(crate) fn p2p_link<C1, C2>(provider: &pci::Device<C1>, client: &pci::Device<C2>) -> P2pLink
where
    C1: device::DeviceContext,
    C2: device::DeviceContext,
{
    decide(raw_pci_dev(provider), raw_dev(client))
}

/// The path of each client to one provider's memory, as `pci_p2pdma`
/// decides it ([`decide`]), kept from a client's first use on, as
/// `pci_p2pdma` keeps its own decisions (`map_types`, per provider, keyed
/// by the client's PCI domain and id): a device at the same place on the
/// bus is reached the same way. The mapping paths ask it for each page
/// they map, without a config space read each time.
pub(crate) struct PathCache {
    /// Each a client's key (`msvm_pci_dev_key`: its domain, bus and
    /// devfn, plus one, at most 49 bits, never 0) in bits 63:8 and its
    /// path in bits 7:0, or 0 for a free slot; taken once, never freed (a
    /// full cache decides again each time).
    slots: [Atomic<u64>; PATH_SLOTS],
}

/// Clients a [`PathCache`] keeps.
const PATH_SLOTS: usize = 32;

impl PathCache {
    /// An empty cache.
    pub(crate) fn new() -> Self {
        Self {
            slots: core::array::from_fn(|_| Atomic::new(0)),
        }
    }

    /// The path `client` takes to `provider`'s memory.
    pub(crate) fn path<C>(&self, provider: &pci::Device<C>, client: &device::Device) -> P2pPath
    where
        C: device::DeviceContext,
    {
        // SAFETY: `client` is a valid `struct device` (the borrow).
        let key = unsafe { b::msvm_pci_dev_key(super::rawdev::raw(client)) };
        if key == 0 {
            return P2pPath::None;
        }
        for slot in &self.slots {
            let v = slot.load(Relaxed);
            if v == 0 {
                break;
            }
            if v >> 8 == key {
                return P2pPath::from_code(v & 0xff);
            }
        }
        let path = decide(raw_pci_dev(provider), super::rawdev::raw(client)).path;
        // No path is decided again at the next use: what made it (a device
        // gone, an error recovery) may pass.
        if path == P2pPath::None {
            return path;
        }
        let v = key << 8 | path.code();
        for slot in &self.slots {
            match slot.cmpxchg(0, v, Relaxed) {
                Ok(_) => break,
                // Another route of the same client took it first.
                Err(old) if old >> 8 == key => break,
                Err(_) => {}
            }
        }
        path
    }
}

impl P2pPath {
    fn code(self) -> u64 {
        match self {
            Self::Bus => 1,
            Self::HostBridge => 2,
            Self::None => 3,
        }
    }

    fn from_code(c: u64) -> Self {
        match c {
            1 => Self::Bus,
            2 => Self::HostBridge,
            _ => Self::None,
        }
    }
}

/// What BAR `bar` of `pdev` adds to a CPU physical address in it to make
/// its PCI bus address (`pci_p2pdma_bus_addr_map`'s offset).
pub(crate) fn bar_bus_offset(pdev: &pci::Device<device::Bound>, bar: u32) -> Result<u64> {
    let bar = i32::try_from(bar)?;
    // SAFETY: `raw_pci_dev(pdev)` is a valid, bound `struct pci_dev` (the
    // borrow); the helper reads BAR `bar`'s resource, which the caller
    // checked exists.
    Ok(unsafe { b::msvm_pci_bar_bus_offset(raw_pci_dev(pdev), bar) })
}

/// What a BAR of a device is, for the choice of a generic device's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MemBar {
    /// The BAR's number.
    pub(crate) bar: u32,
    /// Its size in bytes.
    pub(crate) len: u64,
    /// Whether it is prefetchable (the CPU may merge and write-combine).
    pub(crate) prefetchable: bool,
}

/// The memory BARs of `pdev` (I/O port BARs, absent ones and the upper
/// halves of 64-bit BARs left out), by number.
pub(crate) fn mem_bars(
    pdev: &pci::Device<device::Bound>,
) -> impl Iterator<Item = MemBar> + Clone + '_ {
    (0..6i32).filter_map(move |i| {
        // SAFETY: `raw_pci_dev(pdev)` is a valid `struct pci_dev` for the
        // duration of the call (see `raw_pci_dev`); `i` is below
        // `PCI_STD_NUM_BARS`, a valid index of its resources.
        let flags = u64::from_safe_cast(unsafe { b::msvm_pci_bar_flags(raw_pci_dev(pdev), i) });
        let bar = u32::try_from(i).ok()?;
        let len = pdev.resource_len(bar).ok()?;
        let (mem, pref) = (
            u64::from(bindings::IORESOURCE_MEM),
            u64::from(bindings::IORESOURCE_PREFETCH),
        );
        (flags & mem != 0 && len > 0).then_some(MemBar {
            bar,
            len,
            prefetchable: flags & pref != 0,
        })
    })
}

/// Clears the bus-master bit of bound device `pdev`'s command register:
/// from then on it starts no DMA (what a driver does to a device whose
/// engine would not stop; its MSI, a memory write, stops too).
pub(crate) fn clear_master(pdev: &pci::Device<device::Bound>) {
    // SAFETY: `pdev` is a valid, bound `struct pci_dev` (the borrow);
    // `pci_clear_master` only writes its command register.
    unsafe { bindings::pci_clear_master(raw_pci_dev(pdev)) };
}

/// Enables memory decoding of `pdev` (not I/O ports, not bus mastering:
/// msvm's engine is the CPU, the device itself never masters the bus) until
/// it is unbound or its probe fails: the disable is device-managed.
pub(crate) fn enable_mem_managed(pdev: &pci::Device<device::Core<'_>>) -> Result {
    // SAFETY: `raw_pci_dev(pdev)` is a valid `struct pci_dev`, in its
    // probe (the `Core` context), where device-managed actions may be
    // added; the action's only argument is that device, which outlives its
    // devres list.
    to_result(unsafe { b::msvm_pci_enable_mem_managed(raw_pci_dev(pdev)) })
}

/// Adds PCI id `vendor:device` to this module's PCI driver `name`, with no
/// driver data, and probes the devices it matches (which probe as generic
/// devices, `crate::device::GENERIC`). As `vfio-pci`'s `ids=` does: Linux
/// 7.3's sysfs `new_id` refuses driver data that is no id-table entry's,
/// which for a Rust driver is a pointer. `EEXIST` if the driver's id table
/// lists the id (dynamic ids match first: its devices would turn generic),
/// `ENODEV` if this module has no PCI driver of that name.
pub(crate) fn add_dynamic_id(name: &CStr, vendor: u16, device: u16) -> Result {
    // SAFETY: `name` is a NUL-terminated string valid for the call. The
    // helper only looks at drivers the PCI bus iterator holds (registered,
    // and kept so while it runs), and only changes one owned by this module.
    to_result(unsafe {
        b::msvm_pci_add_dynid(name.as_char_ptr(), u32::from(vendor), u32::from(device))
    })
}
