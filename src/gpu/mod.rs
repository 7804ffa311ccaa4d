// SPDX-License-Identifier: GPL-2.0

//! The hardware boundary: what msvm asks of a device, one implementation
//! per kind of device (after nova-core's `falcon/hal.rs`: a trait, a
//! `&'static dyn` per device kind).
//!
//! - [`hal`]: the trait, and the CPU engine's implementation for devices
//!   that are memory only (`ivshmem-plain`, generic devices);
//! - [`model`]: msvm-gpu, the PCIe GPU model of `device/`
//!   (Documentation/hardware.rst);
//! - [`regs`]: msvm-gpu's BAR0 registers;
//! - [`irq`]: msvm-gpu's interrupt;
//! - [`ring`]: an engine's ring, which both of msvm-gpu's engines have;
//! - [`copy`]: msvm-gpu's copy engine (which migrations use:
//!   `crate::vram::Blit`);
//! - [`job`], [`mmu`], [`faults`]: msvm-gpu's job engine, the MMU whose
//!   contexts and page tables its jobs run in (`crate::engine`), and the
//!   fault buffer its jobs stall on;
//! - [`paths`]: which way msvm-gpu's DMA went (its counters).

use kernel::{prelude::*, sync::Arc};

pub(crate) mod copy;
pub(crate) mod faults;
pub(crate) mod hal;
pub(crate) mod irq;
pub(crate) mod job;
pub(crate) mod mmu;
pub(crate) mod model;
pub(crate) mod paths;
pub(crate) mod regs;
pub(crate) mod ring;

use copy::CopyEngine;
use faults::FaultBuffer;
use irq::Interrupt;
use job::JobEngine;
use mmu::Mmu;

use crate::mm::devpt::DeviceTable;
use crate::mm::devtables::NewDeviceTable;

/// A device's engines and MMU, as the rest of msvm uses them.
#[derive(Clone)]
pub(crate) struct Hw {
    pub(crate) copy: Arc<CopyEngine>,
    pub(crate) jobs: Arc<JobEngine>,
    pub(crate) mmu: Arc<Mmu>,
    pub(crate) faults: Arc<FaultBuffer>,
}

impl Hw {
    /// What makes the device's side of each new VM table: an MMU context.
    pub(crate) fn device_tables(&self) -> Result<NewDeviceTable> {
        let mmu = self.mmu.clone();
        let f = move || -> Option<KBox<dyn DeviceTable>> {
            let ctx = KBox::new(mmu.context()?, GFP_KERNEL).ok()?;
            Some(ctx)
        };
        Ok(KBox::new(f, GFP_KERNEL)?)
    }
}

/// A device's engines, started at probe ([`hal::Hal::start`]) and stopped
/// when they are dropped, before the device is unbound.
pub(crate) struct Engines<'a> {
    hw: Hw,
    irq: Interrupt<'a>,
}

impl<'a> Engines<'a> {
    /// The engines and the MMU.
    pub(crate) fn hw(&self) -> &Hw {
        &self.hw
    }
}

impl Drop for Engines<'_> {
    fn drop(&mut self) {
        // The engines stop before their interrupt goes (`irq` is dropped
        // after this).
        self.hw.copy.shut_down();
        self.hw.jobs.shut_down();
    }
}
