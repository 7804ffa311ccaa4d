// SPDX-License-Identifier: GPL-2.0

//! msvm-gpu's interrupt: one MSI vector, its causes counted in memory
//! (`IRQ_MEM`), or, if the device cannot write them there, in `IRQ_STATUS`
//! (Documentation/hardware.rst, "Interrupts"); its handler for as long as
//! the device is bound, and the probe's self-test that each cause reaches
//! it.
//!
//! Why counters in memory: a register access is a round trip to the
//! device (under QEMU 11.1, which posts no write to a device with a mapped
//! region, a message to the device's process and its reply, with QEMU's
//! global lock held meanwhile), and a handler that read and
//! cleared `IRQ_STATUS` made two per interrupt, one interrupt per window
//! of a job. The counters cost none: the device only ever writes them and
//! the handler only reads them, so nothing is cleared and no cause is
//! lost between a read and a clear (as Xe's memory-based interrupts,
//! `xe_memirq.c`, spare a VF its register accesses).

use kernel::{
    device::Bound,
    dma::Coherent,
    io::{io_read, Io},
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
use super::regs::{self, IRQ_ENABLE, IRQ_MEM_HI, IRQ_MEM_LO, IRQ_RAISE, IRQ_STATUS};
use super::ring::Regs;

/// How long the self-test waits for one interrupt (QEMU under TCG delivers
/// in milliseconds; a lost interrupt waits this long once).
const WAIT_MS: u32 = 2000;

/// The device's cause counters in memory (`IRQ_MEM`): a 32-bit count per
/// cause, which only the device writes, and the counts the handler saw
/// last.
///
/// # Invariants
///
/// While `buf` is `Some`, `IRQ_MEM` may name it, and the device may write
/// it: it is freed only once `IRQ_MEM` is off ([`Drop`]), or else leaked.
struct Counters {
    bar: Arc<Regs>,
    buf: Option<Coherent<[u32]>>,
    seen: [Atomic<u32>; regs::CAUSES],
}

impl Counters {
    /// New counters, all 0, not given to the device yet.
    fn new(pdev: &pci::Device<Bound>, bar: Arc<Regs>) -> Result<Self> {
        let buf = Coherent::zeroed_slice(pdev.as_ref(), regs::CAUSES, GFP_KERNEL)?;
        Ok(Self {
            bar,
            buf: Some(buf),
            seen: [const { Atomic::new(0) }; regs::CAUSES],
        })
    }

    /// Has the device count its causes here, from 0.
    fn start(&self, pdev: &pci::Device<Bound>) -> Result {
        let buf = self.buf.as_ref().ok_or(EINVAL)?;
        let addr = buf.dma_address();
        let io = self.bar.access(pdev.as_ref())?;
        // CAST: the high and low words of the address (16-byte aligned: a
        // coherent allocation is page aligned).
        io.write_reg(IRQ_MEM_HI::zeroed().with_addr((addr >> 32) as u32));
        // INVARIANT: `buf` is named from here on, and lives until `drop`
        // turns `IRQ_MEM` off.
        io.write_reg(IRQ_MEM_LO::zeroed().with_value(addr as u32 | regs::IRQ_MEM_ENABLE));
        Ok(())
    }

    /// The causes counted since the last call: those whose count changed.
    /// Called by the handler only (never twice at once).
    fn take(&self) -> u32 {
        let Some(buf) = self.buf.as_ref() else {
            return 0;
        };
        let mut raised = 0;
        for (i, seen) in self.seen.iter().enumerate() {
            let read = || -> Result<u32> { Ok(io_read!(buf, [try: i])) };
            let Ok(now) = read().map(u32::from_le) else {
                continue;
            };
            if seen.xchg(now, Relaxed) != now {
                raised |= 1 << i;
            }
        }
        raised
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        // Off, and read back (a read is answered after every write before
        // it, and the device writes counts only while `IRQ_MEM` is on, under
        // the lock that turns it off: none comes after), then freed; if the
        // registers are gone already, or do not read 0, the device may
        // still write: leaked.
        let off = self.bar.try_access().is_some_and(|io| {
            io.write_reg(IRQ_MEM_LO::zeroed());
            io.read(IRQ_MEM_LO).into_raw() & regs::IRQ_MEM_ENABLE == 0
        });
        if !off {
            core::mem::forget(self.buf.take());
        }
    }
}

/// The handler: takes the causes raised (counted in memory, or from
/// `IRQ_STATUS`, acknowledged), counts them, and wakes the engines'
/// waiters on COMPLETION or ERROR, and the job engine's on FAULT (its
/// submitter takes the fault records: `super::faults`).
pub(crate) struct Handler {
    ce: Arc<CopyEngine>,
    jobs: Arc<JobEngine>,
    faults: Arc<FaultBuffer>,
    counters: Counters,
    /// Interrupts handled.
    pub(crate) interrupts: Atomic<u64>,
    /// Those whose causes were counted in memory.
    from_memory: Atomic<u64>,
    /// How many carried each cause.
    causes: [Atomic<u64>; regs::CAUSES],
}

impl Handler {
    /// How many interrupts carried cause `cause`.
    fn seen(&self, cause: usize) -> u64 {
        self.causes.get(cause).map_or(0, |c| c.load(Relaxed))
    }

    /// The causes in `IRQ_STATUS`, acknowledged: `None` if there are none,
    /// or if the device no longer answers (all ones).
    fn status_causes(&self) -> Option<u32> {
        let io = self.ce.bar().try_access()?;
        let causes = io.read(IRQ_STATUS).causes();
        let raised = u32::from(causes);
        if raised == 0 || raised == u32::MAX {
            return None;
        }
        // Cleared before the work is looked at: a cause raised again from
        // here on signals again (edge semantics).
        io.write_reg(IRQ_STATUS::zeroed().with_causes(causes));
        Some(raised)
    }
}

impl irq::Handler for Handler {
    fn handle(&self) -> IrqReturn {
        // The counters first: while they are on, an enabled cause never
        // goes to `IRQ_STATUS`, which is read only if they show nothing
        // (a cause counted before an interrupt's handler ran is taken by
        // that handler, and leaves the next interrupt nothing; the device
        // could not write them and turned them off).
        let raised = match self.counters.take() {
            0 => match self.status_causes() {
                Some(r) => r,
                None => return IrqReturn::None,
            },
            r => {
                self.from_memory.add(1, Relaxed);
                r
            }
        };
        self.interrupts.add(1, Relaxed);
        for (bit, n) in self.causes.iter().enumerate() {
            if raised & (1 << bit) != 0 {
                n.add(1, Relaxed);
            }
        }
        if raised & regs::ERROR != 0 {
            self.ce.note_error();
            self.jobs.note_error();
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
    /// for `ce`, with every cause disabled and cleared, and counted in
    /// memory.
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
        let counters = Counters::new(pdev, ce.bar().clone())?;
        counters.start(pdev)?;
        let handler = Handler {
            ce,
            jobs,
            faults,
            counters,
            interrupts: Atomic::new(0),
            from_memory: Atomic::new(0),
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
    /// once: the device's eventfd (and its counters' DMA), QEMU's MSI
    /// emulation and the guest's interrupt routing, end to end. Leaves
    /// every cause disabled. Returns whether every cause was counted in
    /// memory (else the device could not write the counters, and its
    /// causes go to `IRQ_STATUS`).
    pub(crate) fn selftest(&self, pdev: &pci::Device<Bound>) -> Result<bool> {
        let h = self.handler();
        let io = h.ce.bar().access(pdev.as_ref())?;
        let in_memory = h.from_memory.load(Relaxed);
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
        Ok(h.from_memory.load(Relaxed) - in_memory == regs::CAUSES as u64)
    }
}
