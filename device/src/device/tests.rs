//! The device's regions, registers and interrupts.

use super::*;
use crate::regs::{cause, IRQ_ENABLE, IRQ_RAISE, SCRATCH};

#[test]
fn region_info_is_cut_to_argsz_and_carries_the_fd_when_whole() {
    let d = Device::new(4 << 20).unwrap();
    let (b, fd) = d.region_info(region::BAR2, 32).unwrap();
    assert_eq!(b.len(), 32);
    assert_eq!(
        u32::from_le_bytes(b[0..4].try_into().unwrap()),
        64,
        "argsz asks for more"
    );
    assert!(fd.is_none());
    let (b, fd) = d.region_info(region::BAR2, 64).unwrap();
    assert_eq!(b.len(), 64);
    assert!(fd.is_some());
    // The sparse area covers the whole BAR.
    assert_eq!(u64::from_le_bytes(b[56..64].try_into().unwrap()), 4 << 20);
    let (b, fd) = d.region_info(region::BAR0, 32).unwrap();
    assert_eq!((b.len(), fd), (32, None));
    assert!(d.region_info(9, 32).is_err());
}

#[test]
fn register_accesses_are_bounded() {
    let d = Device::new(2 << 20).unwrap();
    d.region_write(region::BAR0, SCRATCH, &7u32.to_le_bytes())
        .unwrap();
    let mut b = [0; 4];
    d.region_read(region::BAR0, SCRATCH, &mut b).unwrap();
    assert_eq!(u32::from_le_bytes(b), 7);
    assert!(d.region_read(region::BAR0, BAR0_SIZE - 2, &mut b).is_err());
    assert!(d.region_read(region::BAR0, 0, &mut [0; 16]).is_err());
    assert!(Device::new(3 << 20).is_err());
}

#[test]
fn a_raised_cause_signals_the_eventfd_once_until_cleared() {
    use nix::sys::eventfd::{EfdFlags, EventFd};
    use std::os::fd::AsFd;
    let d = Device::new(2 << 20).unwrap();
    let ev = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK).unwrap();
    let fd: OwnedFd = ev.as_fd().try_clone_to_owned().unwrap();
    // Raised before QEMU connects MSI: pending, nothing signalled.
    d.region_write(region::BAR0, IRQ_ENABLE, &cause::ALL.to_le_bytes())
        .unwrap();
    d.raise(cause::FAULT).unwrap();
    assert!(ev.read().is_err());
    d.set_irqs(
        set::ACTION_TRIGGER | set::DATA_EVENTFD,
        irq::MSI,
        0,
        1,
        vec![fd],
        &[],
    )
    .unwrap();
    // A bool trigger of false signals nothing; of true, once.
    d.set_irqs(
        set::ACTION_TRIGGER | set::DATA_BOOL,
        irq::MSI,
        0,
        1,
        vec![],
        &[0],
    )
    .unwrap();
    assert!(ev.read().is_err());
    d.set_irqs(
        set::ACTION_TRIGGER | set::DATA_BOOL,
        irq::MSI,
        0,
        1,
        vec![],
        &[1],
    )
    .unwrap();
    assert_eq!(ev.read().unwrap(), 1);
    // A second cause is a new edge; the same one again is not.
    d.region_write(region::BAR0, IRQ_RAISE, &cause::COMPLETION.to_le_bytes())
        .unwrap();
    assert_eq!(ev.read().unwrap(), 1);
    d.raise(cause::COMPLETION).unwrap();
    assert!(ev.read().is_err(), "no edge for a cause already raised");
    // Cleared, then raised: signalled again.
    d.region_write(region::BAR0, 0x20, &cause::ALL.to_le_bytes())
        .unwrap();
    d.raise(cause::COMPLETION).unwrap();
    assert_eq!(ev.read().unwrap(), 1);
    // Disconnected (MSI disabled): nothing signalled.
    d.set_irqs(
        set::ACTION_TRIGGER | set::DATA_EVENTFD,
        irq::MSI,
        0,
        0,
        vec![],
        &[],
    )
    .unwrap();
    d.region_write(region::BAR0, 0x20, &cause::ALL.to_le_bytes())
        .unwrap();
    d.raise(cause::ERROR).unwrap();
    assert!(ev.read().is_err());
    // No MSI-X, no INTx: only an empty request is accepted.
    assert!(d
        .set_irqs(set::ACTION_TRIGGER, 2, 0, 1, vec![], &[])
        .is_err());
    assert!(d
        .set_irqs(set::ACTION_TRIGGER, 2, 0, 0, vec![], &[])
        .is_ok());
}

#[test]
fn counters_reach_memory_before_the_signal_and_fall_back_to_irq_status() {
    use crate::dma::prot;
    use crate::mem::Mmap;
    use crate::regs::{IRQ_MEM, IRQ_MEM_LEN, IRQ_STATUS};
    use nix::sys::eventfd::{EfdFlags, EventFd};
    use std::os::fd::AsFd;
    const RAM: u64 = 0x20_0000;
    let d = Device::new(2 << 20).unwrap();
    let fd = memfd("ram", 4096).unwrap();
    let ram = Mmap::new(&fd, 0, 4096).unwrap();
    d.dma()
        .map(RAM, 4096, prot::READ | prot::WRITE, Some((fd, 0)))
        .unwrap();
    let ev = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK).unwrap();
    let efd: OwnedFd = ev.as_fd().try_clone_to_owned().unwrap();
    d.set_irqs(
        set::ACTION_TRIGGER | set::DATA_EVENTFD,
        irq::MSI,
        0,
        1,
        vec![efd],
        &[],
    )
    .unwrap();
    let counts = || {
        let mut b = [0u8; IRQ_MEM_LEN];
        ram.read(0x100, &mut b).unwrap();
        let w = |i: usize| u32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap());
        [w(0), w(1), w(2), w(3)]
    };
    let write = |off: u64, v: u32| d.region_write(region::BAR0, off, &v.to_le_bytes()).unwrap();
    write(IRQ_MEM + 4, 0);
    write(IRQ_MEM, (RAM + 0x100) as u32 | 1);
    write(IRQ_ENABLE, cause::ALL);
    // Bus mastering off: no DMA, so the cause goes to IRQ_STATUS, and
    // memory mode ends.
    d.raise(cause::COMPLETION).unwrap();
    assert_eq!(counts(), [0; 4]);
    assert_eq!(ev.read().unwrap(), 1);
    let mut st = [0u8; 4];
    d.region_read(region::BAR0, IRQ_STATUS, &mut st).unwrap();
    assert_eq!(u32::from_le_bytes(st), cause::COMPLETION);
    d.region_read(region::BAR0, IRQ_MEM, &mut st).unwrap();
    assert_eq!(u32::from_le_bytes(st), 0, "memory mode ended");
    // Bus master on, memory mode again: every raise is counted in memory
    // and signalled, the same cause again too.
    d.region_write(region::CONFIG, 4, &[0x06, 0]).unwrap();
    write(IRQ_STATUS, cause::ALL);
    write(IRQ_MEM, (RAM + 0x100) as u32 | 1);
    for k in 1..=2 {
        d.raise(cause::COMPLETION).unwrap();
        assert_eq!(counts(), [k, 0, 0, 0]);
        assert_eq!(ev.read().unwrap(), 1);
    }
    write(IRQ_RAISE, cause::FAULT);
    assert_eq!(counts(), [2, 1, 0, 0]);
    assert_eq!(ev.read().unwrap(), 1);
    d.region_read(region::BAR0, IRQ_STATUS, &mut st).unwrap();
    assert_eq!(u32::from_le_bytes(st), 0, "nothing left in IRQ_STATUS");
    // Counters at an address outside the DMA map: nothing written there,
    // the cause in IRQ_STATUS, signalled.
    write(IRQ_MEM, (RAM + 0x10_0000) as u32 | 1);
    d.raise(cause::ERROR).unwrap();
    assert_eq!(ev.read().unwrap(), 1);
    d.region_read(region::BAR0, IRQ_STATUS, &mut st).unwrap();
    assert_eq!(u32::from_le_bytes(st), cause::ERROR);
    assert_eq!(counts(), [2, 1, 0, 0]);
}
