// SPDX-License-Identifier: GPL-2.0

//! PCI helpers the `kernel::pci` abstraction does not offer: the PCI domain
//! and PCIe peer-to-peer distances.

use kernel::{bindings, device, pci};

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
