// SPDX-License-Identifier: GPL-2.0

//! The PCI and DRM driver: probe, unbind, one render node per device.

use kernel::{
    device::{Core, DeviceContext},
    dma::Device as _,
    drm::{self, gem, ioctl},
    pci,
    prelude::*,
};

use crate::device::{DeviceKind, Gpu, GENERIC};
use crate::gpu::{hal::CpuEngine, model::MsvmGpu};
use crate::mm::abi::{
    drm_msvm_exec, drm_msvm_migrate, drm_msvm_prefetch, drm_msvm_query, drm_msvm_residency,
    drm_msvm_set_attr, drm_msvm_stats, drm_msvm_vm_create, drm_msvm_vm_destroy, DRM_MSVM_EXEC,
    DRM_MSVM_MIGRATE, DRM_MSVM_PREFETCH, DRM_MSVM_QUERY, DRM_MSVM_RESIDENCY, DRM_MSVM_SET_ATTR,
    DRM_MSVM_STATS, DRM_MSVM_VM_CREATE, DRM_MSVM_VM_DESTROY,
};
use crate::mm::cancel::{Departures, GoingAway};
use crate::mm::drm_ioctl::declare_msvm_ioctls;

use super::file::File;
use super::gem::MsvmObject;

/// The msvm driver type (PCI and DRM).
pub(crate) struct MsvmDriver;

/// The DRM device of an msvm GPU.
pub(crate) type MsvmDevice<Ctx = drm::Normal> = drm::Device<MsvmDriver, Ctx>;

/// Emulated GPU: QEMU's `ivshmem-plain`, whose BAR2 is its memory.
const IVSHMEM: DeviceKind = DeviceKind {
    vram_bar: Some(2),
    name: "ivshmem",
    hal: &CpuEngine,
};

/// msvm-gpu, the PCIe GPU model of `device/`: BAR2 is its VRAM
/// (Documentation/hardware.rst).
const MSVM_GPU: DeviceKind = DeviceKind {
    vram_bar: Some(2),
    name: "msvm-gpu",
    hal: &MsvmGpu,
};

// The devices msvm binds, the one place they are listed. Real device ids
// go here, with their VRAM BAR. Any other device can be bound at run time
// (module parameter `generic_id`, `driver_override`) as a `GENERIC` one:
// see Documentation/hardware.rst.
kernel::pci_device_table!(
    PCI_TABLE,
    <MsvmDriver as pci::Driver>::IdInfo,
    [
        (
            pci::DeviceId::from_id(pci::Vendor::REDHAT_QUMRANET, 0x1110),
            IVSHMEM
        ),
        (
            pci::DeviceId::from_id(pci::Vendor::REDHAT, 0x00f0),
            MSVM_GPU
        )
    ]
);

/// msvm's devices going away, which every msvm ioctl stops for
/// ([`Cancel::ioctl`](crate::mm::cancel::Cancel::ioctl)).
pub(crate) static DEPARTURES: Departures = Departures::new();

/// What a bound device holds: its DRM registration, which owns the [`Gpu`].
pub(crate) struct Binding<'bound> {
    /// Dropped first: every msvm ioctl in progress stops at its next step,
    /// so that the unplug of the DRM device below, which waits for the
    /// ioctls of every DRM device, does not wait for a long one of another
    /// GPU. Its [`Gone`](crate::mm::cancel::Gone) is the [`Gpu`]'s: once
    /// the DRM device is unplugged, the other GPUs' ioctls go on while
    /// this one's memory is torn down.
    _going: GoingAway,
    _reg: drm::Registration<'bound, MsvmDriver>,
}

impl pci::Driver for MsvmDriver {
    type IdInfo = DeviceKind;
    type Data<'bound> = Binding<'bound>;
    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        // No entry: a device bound at run time (a dynamic id with no driver
        // data, from `generic_id`, or `driver_override`).
        let kind = info.unwrap_or(&GENERIC);
        crate::mm::pci::enable_mem_managed(pdev)?;
        kind.hal.enable(pdev);
        // The engine reaches system pages and peers' BARs, which may lie
        // anywhere in the 64-bit space (a large BAR goes above 4 GiB).
        // SAFETY: probe runs before any DMA allocation or mapping of this
        // device.
        unsafe { pdev.dma_set_mask_and_coherent(kernel::dma::DmaMask::new::<64>())? };
        // A probe that fails drops the `Gone` first: the pair does nothing.
        let (going, gone) = DEPARTURES.bind()?;
        let gpu = Gpu::new(pdev, kind, gone)?;
        let drm = drm::UnregisteredDevice::<Self>::new(pdev, Ok(()))?;
        // Client statistics in fdinfo (`super::fdinfo`); the device works
        // without.
        if let Err(e) = crate::mm::fdinfo::add_fdinfo(&drm, pdev.as_ref()) {
            dev_warn!(pdev.as_ref(), "msvm: no fdinfo statistics: {e:?}\n");
        }
        // SAFETY: `reg` is stored in the `Binding`, which is dropped when the
        // device is unbound; it is never forgotten.
        let reg = unsafe { drm::Registration::new(pdev.as_ref(), drm, gpu, 0)? };
        Ok(Binding {
            _going: going,
            _reg: reg,
        })
    }
}

#[vtable]
impl drm::Driver for MsvmDriver {
    type Data = ();
    type RegistrationData<'a> = Gpu<'a>;
    type File = File;
    type Object = gem::Object<MsvmObject>;
    type ParentDevice<Ctx: DeviceContext> = pci::Device<Ctx>;

    const INFO: drm::DriverInfo = drm::DriverInfo {
        major: 0,
        minor: 1,
        patchlevel: 0,
        name: c"msvm",
        desc: c"Multi-device shared virtual memory",
    };

    const FEAT_RENDER: bool = true;

    declare_msvm_ioctls! { MsvmDriver;
        (MSVM_QUERY, DRM_MSVM_QUERY, drm_msvm_query, ioctl::RENDER_ALLOW, File::query),
        (MSVM_VM_CREATE, DRM_MSVM_VM_CREATE, drm_msvm_vm_create, ioctl::RENDER_ALLOW, File::vm_create),
        (MSVM_VM_DESTROY, DRM_MSVM_VM_DESTROY, drm_msvm_vm_destroy, ioctl::RENDER_ALLOW, File::vm_destroy),
        (MSVM_MIGRATE, DRM_MSVM_MIGRATE, drm_msvm_migrate, ioctl::RENDER_ALLOW, File::migrate),
        (MSVM_STATS, DRM_MSVM_STATS, drm_msvm_stats, ioctl::RENDER_ALLOW, File::stats),
        (MSVM_EXEC, DRM_MSVM_EXEC, drm_msvm_exec, ioctl::RENDER_ALLOW, File::exec),
        (MSVM_SET_ATTR, DRM_MSVM_SET_ATTR, drm_msvm_set_attr, ioctl::RENDER_ALLOW, File::set_attr),
        (MSVM_PREFETCH, DRM_MSVM_PREFETCH, drm_msvm_prefetch, ioctl::RENDER_ALLOW, File::prefetch),
        (MSVM_RESIDENCY, DRM_MSVM_RESIDENCY, drm_msvm_residency, ioctl::RENDER_ALLOW, File::residency),
    }
}
