// SPDX-License-Identifier: GPL-2.0

//! msvm-gpu, the PCIe GPU model of `device/`.

use kernel::{
    device::{Bound, Core},
    io::Io,
    pci,
    prelude::*,
};

use kernel::sync::Arc;

use super::copy::CopyEngine;
use super::faults::FaultBuffer;
use super::hal::Hal;
use super::irq::Interrupt;
use super::job::{JobEngine, WATCHDOG_MAX_MS};
use super::mmu::Mmu;
use super::regs::{self, ID, JOB_WATCHDOG, SCRATCH, VERSION, VRAM_SIZE_HI, VRAM_SIZE_LO};
use super::{Engines, Hw};

/// msvm-gpu.
pub(crate) struct MsvmGpu;

/// Checks the registers of the device behind `bar`: its identity and
/// version, `VRAM_SIZE` against the `vram_len` bytes of BAR2, and that
/// `SCRATCH` holds what is written. Returns the interface version.
fn identify(
    pdev: &pci::Device<Bound>,
    bar: &pci::Bar<'_, { regs::END }>,
    vram_len: u64,
) -> Result<(u32, u32)> {
    let id = bar.read(ID).value();
    let version = bar.read(VERSION);
    let (major, minor) = (u32::from(version.major()), u32::from(version.minor()));
    if id != regs::ID_VALUE || major != regs::VERSION_MAJOR || minor < regs::VERSION_MINOR {
        dev_err!(
            pdev.as_ref(),
            "msvm-gpu: ID {id:#010x}, version {major}.{minor}: not a device of interface {}.{} or a later {0}.x\n",
            regs::VERSION_MAJOR,
            regs::VERSION_MINOR
        );
        return Err(ENODEV);
    }
    let size = (u64::from(bar.read(VRAM_SIZE_HI).value()) << 32)
        | u64::from(bar.read(VRAM_SIZE_LO).value());
    if size != vram_len {
        dev_err!(
            pdev.as_ref(),
            "msvm-gpu: VRAM_SIZE says {size:#x} bytes, BAR2 holds {vram_len:#x}\n"
        );
        return Err(ENODEV);
    }
    // Registers that do not hold what is written are a device that does
    // not answer (a dead link reads all ones).
    for pattern in [0x5a5a_a5a5u32, 0xa5a5_5a5a] {
        bar.write_reg(SCRATCH::zeroed().with_value(pattern));
        let got = bar.read(SCRATCH).value();
        if got != pattern {
            dev_err!(
                pdev.as_ref(),
                "msvm-gpu: SCRATCH reads {got:#010x} after {pattern:#010x}\n"
            );
            return Err(EIO);
        }
    }
    Ok((major, minor))
}

impl Hal for MsvmGpu {
    /// Bus mastering: its interrupt is a memory write (MSI), its engines
    /// DMA. Unbinding disables the device, which clears it.
    fn enable(&self, pdev: &pci::Device<Core<'_>>) {
        pdev.set_master();
    }

    fn start<'a>(
        &self,
        pdev: &'a pci::Device<Bound>,
        vram_len: u64,
    ) -> Result<Option<Engines<'a>>> {
        let bar = pdev.iomap_region_sized::<{ regs::END }>(0, c"msvm-gpu")?;
        let (major, minor) = identify(pdev, &bar, vram_len)?;
        // A job that runs longer is stopped by the device, its engine
        // reset, the job failed with `EIO`: no VM holds the engine longer.
        let asked = crate::module_parameters::job_watchdog_ms.value();
        let watchdog_ms = asked.min(WATCHDOG_MAX_MS);
        if watchdog_ms != asked {
            dev_warn!(
                pdev.as_ref(),
                "msvm-gpu: job_watchdog_ms {asked} is past msvm's own wait for a job: {watchdog_ms} used\n"
            );
        }
        bar.write_reg(JOB_WATCHDOG::zeroed().with_us(watchdog_ms * 1000));
        let bar = Arc::new(bar.into_devres()?, GFP_KERNEL)?;
        let copy = CopyEngine::new(pdev, bar.clone())?;
        let jobs = match JobEngine::new(pdev, bar.clone()) {
            Ok(j) => j,
            Err(e) => {
                copy.shut_down();
                return Err(e);
            }
        };
        let stop = || {
            copy.shut_down();
            jobs.shut_down();
        };
        let bar_faults = bar.clone();
        let mmu = Mmu::new(pdev, bar, crate::module_parameters::mmu_check.value() != 0)
            .inspect_err(|_| stop())?;
        let faults = FaultBuffer::new(pdev, bar_faults).inspect_err(|_| stop())?;
        let faults = Arc::new(faults, GFP_KERNEL).inspect_err(|_| stop())?;
        let irq = Interrupt::new(pdev, (copy.clone(), jobs.clone(), faults.clone()))
            .inspect_err(|_| stop())?;
        // From here on, dropping `engines` stops the engines before the
        // interrupt goes.
        let engines = Engines {
            hw: Hw {
                copy,
                jobs,
                mmu,
                faults,
            },
            irq,
        };
        let in_memory = engines.irq.selftest(pdev)?;
        if !in_memory {
            dev_warn!(
                pdev.as_ref(),
                "msvm-gpu: the device did not count its interrupt causes in memory: read from IRQ_STATUS (two register accesses an interrupt)\n"
            );
        }
        // The self-test's FAULT was no job's.
        engines.hw.faults.forget_raised();
        engines.irq.enable(pdev)?;
        engines.hw.copy.selftest(pdev)?;
        dev_info!(
            pdev.as_ref(),
            "msvm-gpu: interface {major}.{minor}, {} MiB of VRAM, its interrupt answers {} causes, counted {}, its copy engine round-trips a page; jobs run on its job engine, faulting through its fault buffer; job watchdog {watchdog_ms} ms (0: none)\n",
            vram_len >> 20,
            regs::CAUSES,
            if in_memory { "in memory" } else { "in IRQ_STATUS" }
        );
        Ok(Some(engines))
    }
}
