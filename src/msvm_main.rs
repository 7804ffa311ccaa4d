// SPDX-License-Identifier: GPL-2.0

//! msvm: one shared virtual memory for several GPUs and the processes that
//! use them.
//!
//! See `Documentation/design.rst` for the architecture and
//! `include/uapi/drm/msvm_drm.h` for the ABI.

use kernel::{pci, prelude::*};

mod access;
mod block_key;
mod debugfs;
mod device;
mod drm;
mod engine;
mod fault;
mod generation;
mod gpu;
mod lockstat;
mod migrate;
mod mm;
mod placement;
mod process;
mod reclaim;
mod registry;
mod residency;
mod svm;
mod sysmem;
mod thrash;
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
        mmu_check: u32 {
            default: 1,
            description: "msvm-gpu's MMU checking mode: the device walks the page table again at every TLB hit and fails a job that would use a translation no longer in it (1, default; 0 off)",
        },
        job_watchdog_ms: u32 {
            default: 2000,
            description: "msvm-gpu's job watchdog: a job that runs longer, its stalls on faults not counted, is stopped by the device and fails with EIO (ms, default 2000; 0 off; at most 10000)",
        },
        thrash: u32 {
            default: 1,
            description: "Thrashing detection: 1 pins 2 MiB blocks that keep moving (default), 0 off",
        },
        thrash_threshold: u32 {
            default: 3,
            description: "Thrashing events (moves within thrash_lapse_ms of the last) that pin a block (2..7; UVM: 3)",
        },
        thrash_lapse_ms: u32 {
            default: 10000,
            description: "Longest gap between two moves of a thrashing block, ms, rounded up to 4 ms (UVM: 0.5 on hardware; see placement.rst)",
        },
        thrash_pin_ms: u32 {
            default: 60000,
            description: "How long a thrashing block stays where it is, ms, at most 17.5 minutes (UVM: 300)",
        },
        thrash_epoch_ms: u32 {
            default: 120000,
            description: "Quiet time after which a block's history is forgotten, ms (UVM: 2000)",
        },
        thrash_max_resets: u32 {
            default: 4,
            description: "A block whose pinned history was forgotten more than this many times is not pinned again (0..6; UVM: 4)",
        },
        access_counters: u32 {
            default: 1,
            description: "Access counters: 1 moves a 2 MiB block a device's in-place jobs keep using to that device (default), 0 off",
        },
        access_threshold: u32 {
            default: 256,
            description: "Accesses (pages a job used in place) of a 2 MiB block by one device that move it there (1..65535; UVM: 256)",
        },
        policy_blocks: u32 {
            default: 65536,
            description: "2 MiB blocks of one process whose placement state (thrashing history, access counts, generation) the policies keep; blocks beyond are not acted on (default 65536: 128 GiB)",
        },
        read_mostly: u32 {
            default: 1,
            description: "Read-mostly ranges (MSVM_ATTR_READ_MOSTLY): 1 jobs read their system pages through read-only replicas in VRAM (default), 0 the attribute is ignored",
        },
        generic_id: u32 {
            default: 0,
            description: "PCI id 0xVVVVDDDD (vendor, device) whose devices are bound as generic devices at load, VRAM = largest prefetchable BAR (as vfio-pci's ids=; see hardware.rst); 0 none",
        },
        large_folios: u32 {
            default: 0,
            description: "2 MiB device folios: 1 moves THPs (and 2 MiB of untouched memory) to and from devices whole, which needs the zap_huge_pmd() fix of Documentation/upstream/zap_huge_pmd.rst (on a stock 7.3 a device going away can then corrupt memory); 0 in 4 KiB pages (default)",
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
    /// Dropped after the driver: waits for the orphans its devices' unbind
    /// left (`vram/orphans.rs`).
    _orphans: vram::Orphanage,
    #[pin]
    _debugfs: debugfs::Debugfs,
    /// Dropped after the driver, whose devices it shrinks.
    _shrinker: mm::reclaim::Shrinker<reclaim::Reclaimer>,
}

/// Binds the devices of module parameter `generic_id`, if set, as generic
/// devices of driver `name` (registered just before).
fn add_generic_id(name: &'static CStr) -> Result {
    let id = module_parameters::generic_id.value();
    if id == 0 {
        return Ok(());
    }
    // CAST: the halves of a `u32` fit in `u16`.
    let (vendor, device) = ((id >> 16) as u16, id as u16);
    if vendor == 0 || vendor == 0xffff {
        pr_err!("msvm: generic_id {id:#010x}: want 0xVVVVDDDD, a PCI vendor and device id\n");
        return Err(EINVAL);
    }
    mm::pci::add_dynamic_id(name, vendor, device).inspect_err(|&e| {
        if e == EEXIST {
            pr_err!("msvm: generic_id {vendor:04x}:{device:04x}: msvm's id table lists it\n");
        } else {
            pr_err!("msvm: generic_id {vendor:04x}:{device:04x} not added: {e:?}\n");
        }
    })
}

impl kernel::InPlaceModule for MsvmModule {
    fn init(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        // SAFETY: module init runs once, before the driver is registered
        // below, which is the first user of the topology.
        unsafe { registry::init() };
        // SAFETY: as above, before the first VM.
        unsafe { process::init() };
        // SAFETY: as above, before the first pool.
        unsafe { vram::init_orphans() };
        try_pin_init!(Self {
            // Before the driver: a device may go as soon as it is bound.
            _orphans: vram::Orphanage::new()?,
            _driver <- kernel::driver::Registration::new(
                <Self as kernel::ModuleMetadata>::NAME,
                module,
            )
            .pin_chain(|_| add_generic_id(<Self as kernel::ModuleMetadata>::NAME)),
            _debugfs <- debugfs::Debugfs::new(),
            _shrinker: mm::reclaim::Shrinker::register(
                c"msvm",
                KBox::new(reclaim::Reclaimer::new()?, GFP_KERNEL)?,
            )?,
        })
    }
}
