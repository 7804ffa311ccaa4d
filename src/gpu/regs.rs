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

/// Interrupt causes, bits 0 to 3 of the `IRQ_*` registers; each signals
/// the device's one MSI vector.
pub(crate) const CAUSES: usize = 4;

/// Bytes of BAR0 the driver maps: the registers above.
pub(crate) const END: usize = 0x2c;
/// `ID`'s value.
pub(crate) const ID_VALUE: u32 = u32::from_le_bytes(*b"MSVG");
/// The interface major version this driver speaks.
pub(crate) const VERSION_MAJOR: u32 = 1;
