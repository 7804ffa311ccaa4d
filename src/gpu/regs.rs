// SPDX-License-Identifier: GPL-2.0

//! msvm-gpu's BAR0 registers (Documentation/hardware.rst, "BAR0
//! registers"; `device/src/regs.rs` is the device's side).

use kernel::io::{register, register::RegisterBase};

register! {
    /// Reads "MSVG" (little-endian).
    pub(crate) ID(u32) @ 0x000 {
        31:0 value;
    }

    /// The register interface's version.
    pub(crate) VERSION(u32) @ 0x004 {
        31:16 major;
        15:0 minor;
    }

    /// Bytes of VRAM behind BAR2, low word.
    pub(crate) VRAM_SIZE_LO(u32) @ 0x008 {
        31:0 value;
    }

    /// Bytes of VRAM behind BAR2, high word.
    pub(crate) VRAM_SIZE_HI(u32) @ 0x00c {
        31:0 value;
    }

    /// Any value: the driver's own.
    pub(crate) SCRATCH(u32) @ 0x010 {
        31:0 value;
    }

    /// Interrupt causes raised; write 1 to clear.
    pub(crate) IRQ_STATUS(u32) @ 0x020 {
        31:0 causes;
    }

    /// Causes that signal the interrupt.
    pub(crate) IRQ_ENABLE(u32) @ 0x024 {
        31:0 causes;
    }

    /// Raises the causes written (self-test).
    pub(crate) IRQ_RAISE(u32) @ 0x028 {
        31:0 causes;
    }

    /// Microseconds a job may run, not counting its stalls on faults,
    /// before the job engine stops it (0: no watchdog).
    pub(crate) JOB_WATCHDOG(u32) @ 0x02c {
        31:0 us;
    }

    /// Microseconds the job engine has run jobs since the device's reset,
    /// low word.
    pub(crate) JOB_BUSY_LO(u32) @ 0x030 {
        31:0 value;
    }

    /// High word.
    pub(crate) JOB_BUSY_HI(u32) @ 0x034 {
        31:0 value;
    }

    /// Where the device counts the causes it raises, in memory (1.5): the
    /// counters' DMA address, bits 31:4 (bits 3:1 ignored), and bit 0
    /// [`IRQ_MEM_ENABLE`]. Written last: it takes effect, the counters
    /// from 0.
    pub(crate) IRQ_MEM_LO(u32) @ 0x038 {
        31:0 value;
    }

    /// The counters' DMA address, bits 63:32.
    pub(crate) IRQ_MEM_HI(u32) @ 0x03c {
        31:0 addr;
    }

    /// Bytes the device's DMA read or wrote in memory it reaches directly
    /// (guest RAM) since its reset (1.6), low word.
    pub(crate) DMA_DIRECT_LO(u32) @ 0x040 {
        31:0 value;
    }

    /// High word.
    pub(crate) DMA_DIRECT_HI(u32) @ 0x044 {
        31:0 value;
    }

    /// Bytes its DMA moved through the root complex (and the IOMMU, if
    /// any), low word.
    pub(crate) DMA_REMOTE_LO(u32) @ 0x048 {
        31:0 value;
    }

    /// High word.
    pub(crate) DMA_REMOTE_HI(u32) @ 0x04c {
        31:0 value;
    }

    /// Bytes its DMA moved to or from a peer inside its switch (routed by
    /// bus address, no IOMMU), low word.
    pub(crate) DMA_SWITCH_LO(u32) @ 0x050 {
        31:0 value;
    }

    /// High word.
    pub(crate) DMA_SWITCH_HI(u32) @ 0x054 {
        31:0 value;
    }
}

/// The base of a ring's registers: an engine's block in BAR0
/// (hardware.rst, "Rings").
pub(crate) struct RingBase;

/// The copy engine's block.
pub(crate) struct CopyBlock;

impl RegisterBase<RingBase> for CopyBlock {
    const BASE: usize = 0x100;
}

/// The job engine's block.
pub(crate) struct JobBlock;

impl RegisterBase<RingBase> for JobBlock {
    const BASE: usize = 0x200;
}

register! {
    /// Ring base, a DMA address, low word.
    pub(crate) RING_LO(u32) @ RingBase + 0x00 {
        31:0 value;
    }

    /// Ring base, high word.
    pub(crate) RING_HI(u32) @ RingBase + 0x04 {
        31:0 value;
    }

    /// Ring entries (a power of two, 2 to 4096).
    pub(crate) RING_SIZE(u32) @ RingBase + 0x08 {
        31:0 value;
    }

    /// The doorbell: the entry after the last one written.
    pub(crate) RING_TAIL(u32) @ RingBase + 0x10 {
        31:0 value;
    }

    /// Fence address, low word.
    pub(crate) RING_FENCE_LO(u32) @ RingBase + 0x14 {
        31:0 value;
    }

    /// Fence address, high word.
    pub(crate) RING_FENCE_HI(u32) @ RingBase + 0x18 {
        31:0 value;
    }

    /// Status.
    pub(crate) RING_STATUS(u32) @ RingBase + 0x1c {
        1:1 halted => bool;
        0:0 idle => bool;
    }

    /// The error that halted the engine.
    pub(crate) RING_ERROR(u32) @ RingBase + 0x20 {
        31:0 code;
    }

    /// The seqno of the command that halted it, low word.
    pub(crate) RING_ERROR_SEQNO_LO(u32) @ RingBase + 0x24 {
        31:0 value;
    }

    /// The seqno of the command that halted it, high word.
    pub(crate) RING_ERROR_SEQNO_HI(u32) @ RingBase + 0x28 {
        31:0 value;
    }

    /// Reset.
    pub(crate) RING_CTRL(u32) @ RingBase + 0x2c {
        0:0 reset => bool;
    }

    /// Commands completed since the reset, low word.
    pub(crate) RING_DONE_LO(u32) @ RingBase + 0x30 {
        31:0 value;
    }

    /// Commands completed since the reset, high word.
    pub(crate) RING_DONE_HI(u32) @ RingBase + 0x34 {
        31:0 value;
    }

    /// The address the error concerns, low word.
    pub(crate) RING_ERROR_ADDR_LO(u32) @ RingBase + 0x38 {
        31:0 value;
    }

    /// The address the error concerns, high word.
    pub(crate) RING_ERROR_ADDR_HI(u32) @ RingBase + 0x3c {
        31:0 value;
    }
}

register! {
    /// MMU: the context table, 4 KiB aligned, low word (bit 0: it is at a
    /// DMA address, else a VRAM offset).
    pub(crate) MMU_CTX_LO(u32) @ 0x300 {
        31:0 value;
    }

    /// MMU: the context table, high word.
    pub(crate) MMU_CTX_HI(u32) @ 0x304 {
        31:0 value;
    }

    /// MMU: entries of the context table.
    pub(crate) MMU_CTX_COUNT(u32) @ 0x308 {
        31:0 value;
    }

    /// MMU: checking mode.
    pub(crate) MMU_CHECK(u32) @ 0x30c {
        0:0 on => bool;
    }

    /// MMU: the first address an invalidation concerns, low word.
    pub(crate) MMU_INV_START_LO(u32) @ 0x310 {
        31:0 value;
    }

    /// MMU: the first address an invalidation concerns, high word.
    pub(crate) MMU_INV_START_HI(u32) @ 0x314 {
        31:0 value;
    }

    /// MMU: the invalidation's end (exclusive), low word.
    pub(crate) MMU_INV_END_LO(u32) @ 0x318 {
        31:0 value;
    }

    /// MMU: the invalidation's end, high word.
    pub(crate) MMU_INV_END_HI(u32) @ 0x31c {
        31:0 value;
    }

    /// MMU: the context an invalidation concerns.
    pub(crate) MMU_INV_CTX(u32) @ 0x320 {
        31:0 value;
    }

    /// MMU: writing a seqno requests the invalidation.
    pub(crate) MMU_INV_SEQNO(u32) @ 0x324 {
        31:0 value;
    }

    /// MMU: the last invalidation completed.
    pub(crate) MMU_INV_DONE(u32) @ 0x328 {
        31:0 value;
    }

    /// MMU: stale translations the checking mode found.
    pub(crate) MMU_STALE(u32) @ 0x32c {
        31:0 value;
    }

    /// MMU: TLB hits.
    pub(crate) MMU_TLB_HITS(u32) @ 0x330 {
        31:0 value;
    }

    /// MMU: TLB misses.
    pub(crate) MMU_TLB_MISSES(u32) @ 0x334 {
        31:0 value;
    }

    /// MMU: invalidations completed.
    pub(crate) MMU_INVALIDATIONS(u32) @ 0x338 {
        31:0 value;
    }
}

register! {
    /// Faults: the buffer, 4 KiB aligned DMA address, low word.
    pub(crate) FAULT_BUF_LO(u32) @ 0x340 {
        31:0 value;
    }

    /// Faults: the buffer, high word.
    pub(crate) FAULT_BUF_HI(u32) @ 0x344 {
        31:0 value;
    }

    /// Faults: records the buffer holds (0: replayable faults off).
    pub(crate) FAULT_BUF_SIZE(u32) @ 0x348 {
        31:0 value;
    }

    /// Faults: records written (free-running).
    pub(crate) FAULT_PUT(u32) @ 0x34c {
        31:0 value;
    }

    /// Faults: records consumed (free-running).
    pub(crate) FAULT_GET(u32) @ 0x350 {
        31:0 value;
    }

    /// Faults: a job stalls; a fault found the buffer full (write 1 to
    /// clear).
    pub(crate) FAULT_STATUS(u32) @ 0x354 {
        0:0 stalled => bool;
        1:1 overflow => bool;
    }

    /// Faults: the answer to a stall, [`fault::REPLAY`] or
    /// [`fault::CANCEL`].
    pub(crate) FAULT_CTRL(u32) @ 0x358 {
        31:0 value;
    }

    /// Faults: records written, low 32 bits.
    pub(crate) FAULT_FAULTS(u32) @ 0x35c {
        31:0 value;
    }

    /// Faults: faults the buffer had no room for.
    pub(crate) FAULT_OVERFLOWS(u32) @ 0x360 {
        31:0 value;
    }

    /// Faults: replays.
    pub(crate) FAULT_REPLAYS(u32) @ 0x364 {
        31:0 value;
    }

    /// Faults: cancels.
    pub(crate) FAULT_CANCELS(u32) @ 0x368 {
        31:0 value;
    }
}

/// `FAULT_CTRL`'s answers.
pub(crate) mod fault {
    /// The stalled job retries the access.
    pub(crate) const REPLAY: u32 = 1;
    /// The stalled job ends, cancelled.
    pub(crate) const CANCEL: u32 = 2;
}

/// Copy engine opcodes and flags (hardware.rst, "Copy engine").
pub(crate) mod ce {
    /// Copies `len` bytes from `src` to `dst`.
    pub(crate) const COPY: u32 = 1;
    /// Fills `len` bytes at `dst` with the 8-byte pattern `src`.
    pub(crate) const FILL: u32 = 2;
    /// Raise COMPLETION when the command is done.
    pub(crate) const INTERRUPT: u32 = 1 << 0;
    /// `src` is a VRAM offset.
    pub(crate) const SRC_VRAM: u32 = 1 << 1;
    /// `dst` is a VRAM offset.
    pub(crate) const DST_VRAM: u32 = 1 << 2;
}

/// `IRQ_MEM_LO`'s enable bit.
pub(crate) const IRQ_MEM_ENABLE: u32 = 1;

/// Interrupt causes, bits 0 to 3 of the `IRQ_*` registers; each signals
/// the device's one MSI vector.
pub(crate) const CAUSES: usize = 4;
/// A command with INTERRUPT completed (either engine).
pub(crate) const COMPLETION: u32 = 1 << 0;
/// A job stalled on a fault: its record is in the fault buffer.
pub(crate) const FAULT: u32 = 1 << 1;
/// An engine halted.
pub(crate) const ERROR: u32 = 1 << 2;
/// The job engine's watchdog stopped a job (raised with ERROR).
pub(crate) const WATCHDOG: u32 = 1 << 3;

/// The errors that halt an engine (`RING_ERROR`, hardware.rst's codes)
/// that msvm tells apart.
pub(crate) mod error {
    /// Checking mode: a translation the page table no longer holds.
    pub(crate) const STALE_TLB: u32 = 6;
    /// The job ran past `JOB_WATCHDOG`.
    pub(crate) const WATCHDOG: u32 = 8;
}

/// Bytes of BAR0 the driver maps: the registers above.
pub(crate) const END: usize = 0x380;
/// `ID`'s value.
pub(crate) const ID_VALUE: u32 = u32::from_le_bytes(*b"MSVG");
/// The interface major version this driver speaks.
pub(crate) const VERSION_MAJOR: u32 = 1;
/// The least minor version this driver needs: 6 (the job engine, the MMU,
/// the fault buffer, the job engine's watchdog and WAIT, CHECKSUM's
/// CHAIN, the causes counted in memory, the DMA path counters).
pub(crate) const VERSION_MINOR: u32 = 6;

/// A 64-bit counter of two registers: the high word, the low word, and
/// the high word again (the low one may wrap in between: a second try
/// reads it stable). `None` if the device reads all ones (gone).
pub(crate) fn counter64(hi: impl Fn() -> u32, lo: impl Fn() -> u32) -> Option<u64> {
    for _ in 0..3 {
        let (h, l) = (hi(), lo());
        if h == u32::MAX && l == u32::MAX {
            return None;
        }
        if hi() == h {
            return Some((u64::from(h) << 32) | u64::from(l));
        }
    }
    None
}
