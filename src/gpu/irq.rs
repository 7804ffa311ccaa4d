// SPDX-License-Identifier: GPL-2.0

//! msvm-gpu's interrupt: one MSI vector, its causes in `IRQ_STATUS`
//! (Documentation/hardware.rst, "Interrupts"), and the probe's self-test
//! that each cause reaches the handler.

use kernel::{
    device::Bound,
    io::Io,
    irq::{self, Flags, IrqReturn, Registration},
    pci,
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
    time::{delay::fsleep, Delta},
};

use super::regs::{self, IRQ_ENABLE, IRQ_RAISE, IRQ_STATUS};

/// How long the self-test waits for one interrupt (QEMU under TCG delivers
/// in milliseconds; a lost interrupt waits this long once).
const WAIT_MS: u32 = 2000;

/// The self-test's handler: counts interrupts.
struct Count(Atomic<u32>);

impl irq::Handler for Count {
    fn handle(&self) -> IrqReturn {
        self.0.fetch_add(1, Relaxed);
        IrqReturn::Handled
    }
}

/// Checks that each cause, raised through `IRQ_RAISE`, interrupts once:
/// the device's eventfd, QEMU's MSI emulation and the guest's interrupt
/// routing, end to end.
pub(crate) fn selftest(pdev: &pci::Device<Bound>, bar: &pci::Bar<'_, { regs::END }>) -> Result {
    let msi = pci::IrqTypes::default().with(pci::IrqType::Msi);
    let vectors = pdev
        .alloc_irq_vectors(1, 1, msi)
        .inspect_err(|e| dev_err!(pdev.as_ref(), "msvm-gpu: no MSI vector: {e:?}\n"))?;
    // SAFETY: the registration is dropped at the end of this function,
    // before `vectors`, never forgotten.
    let reg = unsafe {
        Registration::new(
            vectors.index(0)?.into(),
            Flags::TRIGGER_NONE,
            c"msvm-gpu-selftest",
            Ok::<_, Error>(Count(Atomic::new(0))),
        )
    };
    let reg = KBox::pin_init(reg, GFP_KERNEL)?;
    let count = || reg.handler().0.load(Relaxed);
    // From a known state: a cause left raised by an earlier binding would
    // look like one raised now.
    bar.write_reg(IRQ_ENABLE::zeroed());
    bar.write_reg(IRQ_STATUS::zeroed().with_causes((1u32 << regs::CAUSES) - 1));
    for cause in 0..regs::CAUSES {
        let bit = 1u32 << cause;
        let before = count();
        bar.write_reg(IRQ_ENABLE::zeroed().with_causes(bit));
        bar.write_reg(IRQ_RAISE::zeroed().with_causes(bit));
        let mut waited = 0;
        while count() == before && waited < WAIT_MS {
            fsleep(Delta::from_millis(1));
            waited += 1;
        }
        let raised = bar.read(IRQ_STATUS).causes();
        bar.write_reg(IRQ_STATUS::zeroed().with_causes(bit));
        bar.write_reg(IRQ_ENABLE::zeroed());
        let seen = count() - before;
        if seen != 1 || raised != bit {
            dev_err!(
                pdev.as_ref(),
                "msvm-gpu: cause {cause} raised (IRQ_STATUS {raised:#x}): {seen} interrupts in {waited} ms, want 1\n"
            );
            return Err(EIO);
        }
    }
    Ok(())
}
