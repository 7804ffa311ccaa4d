// SPDX-License-Identifier: GPL-2.0

//! msvm: one shared virtual memory for several GPUs and the processes that
//! use them.
//!
//! See `Documentation/design.rst` for the architecture and
//! `include/uapi/drm/msvm_drm.h` for the ABI.

use kernel::{pci, prelude::*};

mod debugfs;
mod device;
mod drm;
mod engine;
mod migrate;
mod mm;
mod placement;
mod reclaim;
mod registry;
mod residency;
mod svm;
mod sysmem;
mod topology;
mod vram;

module! {
    type: MsvmModule,
    name: "msvm",
    authors: ["msvm developers"],
    description: "Multi-device shared virtual memory for GPUs",
    license: "GPL",
    params: {
        chunk_mib: u32 {
            default: 64,
            description: "Device memory chunk (one dev_pagemap each) in MiB, 2..1024",
        },
        evict: u32 {
            default: 2,
            description: "How a full device makes room: 0 it does not, 1 plain LRU, 2 scan-resistant (two classes, default)",
        },
    },
}

#[pin_data]
struct MsvmModule {
    #[pin]
    _driver: kernel::driver::Registration<pci::Adapter<drm::driver::MsvmDriver>>,
    #[pin]
    _debugfs: debugfs::Debugfs,
    /// Dropped after the driver, whose devices it shrinks.
    _shrinker: mm::reclaim::Shrinker<reclaim::Reclaimer>,
}

impl kernel::InPlaceModule for MsvmModule {
    fn init(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        // SAFETY: module init runs once, before the driver is registered
        // below, which is the first user of the topology.
        unsafe { registry::init() };
        try_pin_init!(Self {
            _driver <- kernel::driver::Registration::new(
                <Self as kernel::ModuleMetadata>::NAME,
                module,
            ),
            _debugfs <- debugfs::Debugfs::new(),
            _shrinker: mm::reclaim::Shrinker::register(
                c"msvm",
                KBox::new(reclaim::Reclaimer::new()?, GFP_KERNEL)?,
            )?,
        })
    }
}
