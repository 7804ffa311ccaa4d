// SPDX-License-Identifier: GPL-2.0

//! msvm-gpu's copy engine (Documentation/hardware.rst, "Copy engine"):
//! the probe's self-test, a round trip of one page through VRAM by ring,
//! doorbell and fence, with DMA addresses from the DMA API.

use kernel::{
    device::Bound,
    dma::{Coherent, DmaAddress},
    io::{io_read, io_write, Io},
    pci,
    prelude::*,
    sync::barrier::{dma_mb, Read},
    time::{delay::fsleep, Delta},
};

use super::regs::{
    self, ce, CE_CTRL, CE_ERROR, CE_FENCE_HI, CE_FENCE_LO, CE_RING_HI, CE_RING_LO, CE_RING_SIZE,
    CE_STATUS, CE_TAIL,
};

/// How long the self-test waits for its two commands.
const WAIT_MS: u32 = 2000;
/// Entries of the self-test's ring.
const RING: u32 = 16;
/// Bytes of a page of the self-test's buffer: ring, fence, source,
/// destination.
const PAGE: usize = 4096;

/// One command, written into the ring at `entry`.
struct Command {
    flags: u32,
    seqno: u64,
    src: u64,
    dst: u64,
    len: u64,
}

fn write_command(buf: &Coherent<[u64]>, entry: usize, c: &Command) -> Result {
    let at = entry * ce::COMMAND / 8;
    let words = [
        u64::from(ce::COPY) | (u64::from(c.flags) << 32),
        c.seqno,
        c.src,
        c.dst,
        c.len,
    ];
    for k in 0..ce::COMMAND / 8 {
        io_write!(buf, [try: at + k], words.get(k).copied().unwrap_or(0));
    }
    Ok(())
}

/// The word the self-test writes at `i`.
fn pattern(i: usize) -> u64 {
    0x6d73_766d_0000_0000 | (i as u64).wrapping_mul(0x9e37_79b9)
}

/// How long a reset engine may take to stop: longer than the device waits
/// for QEMU to serve one DMA transfer (10 s).
const STOP_MS: u32 = 12_000;

/// Copies a page from system memory to VRAM offset 0 and back to another
/// page, and checks it: the DMA addresses the DMA API gave, the ring, the
/// doorbell and the fence, end to end. Leaves the engine reset, its ring
/// unset. VRAM is not in use yet.
pub(crate) fn selftest(pdev: &pci::Device<Bound>, bar: &pci::Bar<'_, { regs::END }>) -> Result {
    let buf: Coherent<[u64]> = Coherent::zeroed_slice(pdev.as_ref(), 4 * PAGE / 8, GFP_KERNEL)?;
    let r = round_trip(pdev, bar, &buf);
    // Whatever happened, the engine lets go of the buffer before it is
    // freed.
    release(pdev, bar, buf)?;
    r
}

/// Resets the engine, unsets its ring and fence, and waits until it is
/// idle: only then is `buf` freed. An engine that never stops keeps it
/// (leaked, so that no later owner of its pages sees the device write).
fn release(
    pdev: &pci::Device<Bound>,
    bar: &pci::Bar<'_, { regs::END }>,
    buf: Coherent<[u64]>,
) -> Result {
    bar.write_reg(CE_CTRL::zeroed().with_reset(true));
    bar.write_reg(CE_RING_SIZE::zeroed());
    bar.write_reg(CE_RING_LO::zeroed());
    bar.write_reg(CE_RING_HI::zeroed());
    bar.write_reg(CE_FENCE_LO::zeroed());
    bar.write_reg(CE_FENCE_HI::zeroed());
    let mut waited = 0;
    while !bar.read(CE_STATUS).idle() {
        if waited >= STOP_MS {
            dev_err!(
                pdev.as_ref(),
                "msvm-gpu: copy engine still busy {waited} ms after its reset: its buffer is kept\n"
            );
            core::mem::forget(buf);
            return Err(EIO);
        }
        fsleep(Delta::from_millis(1));
        waited += 1;
    }
    Ok(())
}

/// The self-test's commands, run and checked, in `buf` (ring, fence,
/// source page, destination page).
fn round_trip(
    pdev: &pci::Device<Bound>,
    bar: &pci::Bar<'_, { regs::END }>,
    buf: &Coherent<[u64]>,
) -> Result {
    let base: DmaAddress = buf.dma_address();
    let (fence, src, dst) = (PAGE, 2 * PAGE, 3 * PAGE);
    for i in 0..PAGE / 8 {
        io_write!(buf, [try: src / 8 + i], pattern(i));
    }
    write_command(
        buf,
        0,
        &Command {
            flags: ce::DST_VRAM,
            seqno: 1,
            src: base + src as u64,
            dst: 0,
            len: PAGE as u64,
        },
    )?;
    write_command(
        buf,
        1,
        &Command {
            flags: ce::SRC_VRAM,
            seqno: 2,
            src: 0,
            dst: base + dst as u64,
            len: PAGE as u64,
        },
    )?;
    bar.write_reg(CE_CTRL::zeroed().with_reset(true));
    bar.write_reg(CE_RING_LO::zeroed().with_value(base as u32));
    bar.write_reg(CE_RING_HI::zeroed().with_value((base >> 32) as u32));
    bar.write_reg(CE_RING_SIZE::zeroed().with_value(RING));
    let fence_addr = base + fence as u64;
    bar.write_reg(CE_FENCE_LO::zeroed().with_value(fence_addr as u32));
    bar.write_reg(CE_FENCE_HI::zeroed().with_value((fence_addr >> 32) as u32));
    // The ring entries are written (normal memory) before the doorbell
    // (an MMIO write, ordered after them).
    bar.write_reg(CE_TAIL::zeroed().with_value(2u32));
    let mut waited = 0;
    let read_fence = || -> Result<u64> { Ok(io_read!(buf, [try: fence / 8])) };
    while read_fence()? != 2 && waited < WAIT_MS {
        if bar.read(CE_STATUS).halted() {
            break;
        }
        fsleep(Delta::from_millis(1));
        waited += 1;
    }
    let seqno = read_fence()?;
    if seqno != 2 {
        let status = bar.read(CE_STATUS);
        let code = u32::from(bar.read(CE_ERROR).code());
        dev_err!(
            pdev.as_ref(),
            "msvm-gpu: copy engine: fence {seqno} after {waited} ms, want 2 (halted: {}, error {code})\n",
            status.halted()
        );
        return Err(EIO);
    }
    // The page's words are read after the fence that says they are there.
    dma_mb(Read);
    for i in 0..PAGE / 8 {
        let got: u64 = io_read!(buf, [try: dst / 8 + i]);
        if got != pattern(i) {
            dev_err!(
                pdev.as_ref(),
                "msvm-gpu: copy engine: word {i} of the page back from VRAM is {got:#x}, want {:#x}\n",
                pattern(i)
            );
            return Err(EIO);
        }
    }
    Ok(())
}
