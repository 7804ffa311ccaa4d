// SPDX-License-Identifier: GPL-2.0

//! PCI helpers the `kernel::pci` abstraction does not offer: the PCI domain,
//! the kind of a BAR, dynamic ids and PCIe peer-to-peer distances.

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

/// The PCIe peer-to-peer distance between `provider` (whose memory is
/// accessed) and `client` (which accesses it), or `None` if the topology
/// allows no P2P transfer between them (no common upstream bridge and no
/// whitelisted host bridge, or ACS redirection in the way).
pub(crate) fn p2pdma_distance<C1, C2>(
    provider: &pci::Device<C1>,
    client: &pci::Device<C2>,
) -> Option<u32>
where
    C1: device::DeviceContext,
    C2: device::DeviceContext,
{
    let mut clients = [raw_dev(client)];
    // SAFETY: both devices are valid for the duration of the call (see `raw_pci_dev`
    // and `raw_dev`); `clients` is an array of one valid `struct device *`,
    // which the function only reads.
    let dist = unsafe {
        b::pci_p2pdma_distance_many(raw_pci_dev(provider), clients.as_mut_ptr(), 1, false)
    };
    u32::try_from(dist).ok()
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
