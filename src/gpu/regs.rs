// SPDX-License-Identifier: GPL-2.0

//! msvm-gpu's BAR0 registers (Documentation/hardware.rst, "BAR0
//! registers"; `device/src/regs.rs` is the device's side).

use kernel::io::register;

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
}

register! {
    /// Copy engine: ring base, a DMA address, low word.
    pub(crate) CE_RING_LO(u32) @ 0x100 {
        31:0 value;
    }

    /// Copy engine: ring base, high word.
    pub(crate) CE_RING_HI(u32) @ 0x104 {
        31:0 value;
    }

    /// Copy engine: ring entries (a power of two, 2 to 4096).
    pub(crate) CE_RING_SIZE(u32) @ 0x108 {
        31:0 value;
    }

    /// Copy engine: the entry the engine executes next.
    pub(crate) CE_HEAD(u32) @ 0x10c {
        31:0 value;
    }

    /// Copy engine: the doorbell, the entry after the last one written.
    pub(crate) CE_TAIL(u32) @ 0x110 {
        31:0 value;
    }

    /// Copy engine: fence address, low word.
    pub(crate) CE_FENCE_LO(u32) @ 0x114 {
        31:0 value;
    }

    /// Copy engine: fence address, high word.
    pub(crate) CE_FENCE_HI(u32) @ 0x118 {
        31:0 value;
    }

    /// Copy engine: status.
    pub(crate) CE_STATUS(u32) @ 0x11c {
        1:1 halted => bool;
        0:0 idle => bool;
    }

    /// Copy engine: the error that halted it.
    pub(crate) CE_ERROR(u32) @ 0x120 {
        31:0 code;
    }

    /// Copy engine: the seqno of the command that halted it, low word.
    pub(crate) CE_ERROR_SEQNO_LO(u32) @ 0x124 {
        31:0 value;
    }

    /// Copy engine: the seqno of the command that halted it, high word.
    pub(crate) CE_ERROR_SEQNO_HI(u32) @ 0x128 {
        31:0 value;
    }

    /// Copy engine: reset.
    pub(crate) CE_CTRL(u32) @ 0x12c {
        0:0 reset => bool;
    }

    /// Copy engine: commands completed since the reset, low word.
    pub(crate) CE_DONE_LO(u32) @ 0x130 {
        31:0 value;
    }

    /// Copy engine: commands completed since the reset, high word.
    pub(crate) CE_DONE_HI(u32) @ 0x134 {
        31:0 value;
    }
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
    /// Bytes of a command.
    pub(crate) const COMMAND: usize = 64;
}

/// Interrupt causes, bits 0 to 3 of the `IRQ_*` registers; each signals
/// the device's one MSI vector.
pub(crate) const CAUSES: usize = 4;
/// A copy-engine command with `ce::INTERRUPT` completed.
pub(crate) const COMPLETION: u32 = 1 << 0;
/// The copy engine halted.
pub(crate) const ERROR: u32 = 1 << 2;

/// Bytes of BAR0 the driver maps: the registers above.
pub(crate) const END: usize = 0x138;
/// `ID`'s value.
pub(crate) const ID_VALUE: u32 = u32::from_le_bytes(*b"MSVG");
/// The interface major version this driver speaks.
pub(crate) const VERSION_MAJOR: u32 = 1;
