// SPDX-License-Identifier: GPL-2.0

//! msvm-gpu's interrupt: one MSI vector, its causes in `IRQ_STATUS`
//! (Documentation/hardware.rst, "Interrupts"), its handler for as long as
//! the device is bound, and the probe's self-test that each cause reaches
//! it.

use kernel::{
    device::Bound,
    io::Io,
    irq::{self, Flags, IrqReturn, Registration},
    pci::{self, IrqVectorRegistration},
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
    time::{delay::fsleep, Delta},
};

use super::copy::CopyEngine;
use super::faults::FaultBuffer;
use super::job::JobEngine;
use super::regs::{self, IRQ_ENABLE, IRQ_RAISE, IRQ_STATUS};

/// How long the self-test waits for one interrupt (QEMU under TCG delivers
/// in milliseconds; a lost interrupt waits this long once).
const WAIT_MS: u32 = 2000;

/// The handler: acknowledges the causes raised, counts them, and wakes the
/// engines' waiters on COMPLETION or ERROR, and the job engine's on FAULT
/// (its submitter takes the fault records: `super::faults`).
pub(crate) struct Handler {
    ce: Arc<CopyEngine>,
    jobs: Arc<JobEngine>,
    faults: Arc<FaultBuffer>,
    /// Interrupts handled, and each cause seen.
    pub(crate) interrupts: Atomic<u64>,
    causes: [Atomic<u64>; regs::CAUSES],
}

impl Handler {
    /// How many interrupts carried cause `cause`.
    fn seen(&self, cause: usize) -> u64 {
        self.causes.get(cause).map_or(0, |c| c.load(Relaxed))
    }
}

impl irq::Handler for Handler {
    fn handle(&self) -> IrqReturn {
        let Some(io) = self.ce.bar().try_access() else {
            return IrqReturn::None;
        };
        let raised = io.read(IRQ_STATUS).causes();
        // Nothing raised, or a device that no longer answers (all ones).
        if raised == 0 || raised == u32::MAX {
            return IrqReturn::None;
        }
        // Cleared before the work is looked at: a cause raised again from
        // here on signals again (edge semantics).
        io.write_reg(IRQ_STATUS::zeroed().with_causes(raised));
        self.interrupts.add(1, Relaxed);
        for (bit, n) in self.causes.iter().enumerate() {
            if raised & (1 << bit) != 0 {
                n.add(1, Relaxed);
            }
        }
        if raised & (regs::COMPLETION | regs::ERROR) != 0 {
            self.ce.wake();
        }
        // A job's submitter waits for its completion or its stall.
        if raised & regs::FAULT != 0 {
            self.faults.note_raised();
        }
        if raised & (regs::COMPLETION | regs::ERROR | regs::FAULT) != 0 {
            self.jobs.wake();
        }
        IrqReturn::Handled
    }
}

/// The device's interrupt while it is bound: its MSI vector and the
/// handler registered on it.
///
/// # Invariants
///
/// `reg` was registered on the vector `_vectors` allocated; it is dropped
/// first (field order), freeing the IRQ and waiting for a running handler,
/// and `_vectors` (on the heap, never moved out or reached otherwise)
/// after.
pub(crate) struct Interrupt<'a> {
    reg: Pin<KBox<Registration<'a, Handler>>>,
    _vectors: KBox<IrqVectorRegistration<'a>>,
}

impl<'a> Interrupt<'a> {
    /// Allocates the device's MSI vector and registers the handler on it
    /// for `ce`, with every cause disabled and cleared.
    pub(super) fn new(
        pdev: &'a pci::Device<Bound>,
        (ce, jobs, faults): (Arc<CopyEngine>, Arc<JobEngine>, Arc<FaultBuffer>),
    ) -> Result<Self> {
        {
            let io = ce.bar().access(pdev.as_ref())?;
            io.write_reg(IRQ_ENABLE::zeroed());
            io.write_reg(IRQ_STATUS::zeroed().with_causes((1u32 << regs::CAUSES) - 1));
        }
        let msi = pci::IrqTypes::default().with(pci::IrqType::Msi);
        let vectors = pdev
            .alloc_irq_vectors(1, 1, msi)
            .inspect_err(|e| dev_err!(pdev.as_ref(), "msvm-gpu: no MSI vector: {e:?}\n"))?;
        let vectors = KBox::new(vectors, GFP_KERNEL)?;
        // SAFETY: `vectors` is on the heap and stays there, unmoved and
        // unreached, until after `reg` is dropped (the type invariant):
        // the borrow outlives every use of it, which ends with `reg`.
        let v: &'a IrqVectorRegistration<'a> = unsafe { &*core::ptr::from_ref(&*vectors) };
        let handler = Handler {
            ce,
            jobs,
            faults,
            interrupts: Atomic::new(0),
            causes: [const { Atomic::new(0) }; regs::CAUSES],
        };
        // SAFETY: the registration lives in a box that only `Interrupt`
        // owns and drops (freeing the IRQ) before the box's memory goes;
        // were an `Interrupt` forgotten, the box would leak with it, and
        // the handler's memory stay valid.
        let reg = unsafe {
            Registration::new(
                v.index(0)?.into(),
                Flags::TRIGGER_NONE,
                c"msvm-gpu",
                Ok::<_, Error>(handler),
            )
        };
        let reg = KBox::pin_init(reg, GFP_KERNEL)?;
        // INVARIANT: `reg` is registered on `vectors`' vector.
        Ok(Self {
            reg,
            _vectors: vectors,
        })
    }

    /// The handler.
    pub(crate) fn handler(&self) -> &Handler {
        self.reg.handler()
    }

    /// Enables the causes msvm handles: COMPLETION, FAULT, ERROR and
    /// WATCHDOG (which comes with ERROR: counted, nothing more).
    pub(crate) fn enable(&self, pdev: &pci::Device<Bound>) -> Result {
        let io = self.handler().ce.bar().access(pdev.as_ref())?;
        io.write_reg(
            IRQ_ENABLE::zeroed()
                .with_causes(regs::COMPLETION | regs::FAULT | regs::ERROR | regs::WATCHDOG),
        );
        Ok(())
    }

    /// Checks that each cause, raised through `IRQ_RAISE`, interrupts
    /// once: the device's eventfd, QEMU's MSI emulation and the guest's
    /// interrupt routing, end to end. Leaves every cause disabled.
    pub(crate) fn selftest(&self, pdev: &pci::Device<Bound>) -> Result {
        let h = self.handler();
        let io = h.ce.bar().access(pdev.as_ref())?;
        for cause in 0..regs::CAUSES {
            let bit = 1u32 << cause;
            let (before, seen) = (h.interrupts.load(Relaxed), h.seen(cause));
            io.write_reg(IRQ_ENABLE::zeroed().with_causes(bit));
            io.write_reg(IRQ_RAISE::zeroed().with_causes(bit));
            let mut waited = 0;
            while h.seen(cause) == seen && waited < WAIT_MS {
                fsleep(Delta::from_millis(1));
                waited += 1;
            }
            io.write_reg(IRQ_ENABLE::zeroed());
            let (n, of) = (h.interrupts.load(Relaxed) - before, h.seen(cause) - seen);
            if n != 1 || of != 1 {
                dev_err!(
                    pdev.as_ref(),
                    "msvm-gpu: cause {cause} raised: {n} interrupts, {of} with it, in {waited} ms; want 1\n"
                );
                return Err(EIO);
            }
        }
        Ok(())
    }
}
