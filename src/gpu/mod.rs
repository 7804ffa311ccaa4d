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
//! - [`copy`]: msvm-gpu's copy engine.

pub(crate) mod copy;
pub(crate) mod hal;
pub(crate) mod irq;
pub(crate) mod model;
pub(crate) mod regs;
