// SPDX-License-Identifier: GPL-2.0

//! A copy-engine command (Documentation/hardware.rst, "Copy engine"): its
//! fields, and runs of them merged into one.

use kernel::prelude::*;

use super::super::regs::ce;

/// One command (hardware.rst, "Copy engine"): `op` [`ce::COPY`] or
/// [`ce::FILL`], `flags` [`ce::SRC_VRAM`] and [`ce::DST_VRAM`]; the seqno
/// and [`ce::INTERRUPT`] are the submission's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Command {
    pub(crate) op: u32,
    pub(crate) flags: u32,
    pub(crate) src: u64,
    pub(crate) dst: u64,
    pub(crate) len: u64,
}

impl Command {
    /// `len` bytes from DMA address `src` to VRAM offset `dst`.
    pub(crate) fn to_vram(src: u64, dst: usize, len: usize) -> Self {
        Self {
            op: ce::COPY,
            flags: ce::DST_VRAM,
            src,
            dst: dst as u64,
            len: len as u64,
        }
    }

    /// `len` bytes from VRAM offset `src` to DMA address `dst`.
    pub(crate) fn from_vram(src: usize, dst: u64, len: usize) -> Self {
        Self {
            op: ce::COPY,
            flags: ce::SRC_VRAM,
            src: src as u64,
            dst,
            len: len as u64,
        }
    }

    /// `len` bytes from VRAM offset `src` to VRAM offset `dst` (the
    /// ranges apart).
    pub(crate) fn within_vram(src: usize, dst: usize, len: usize) -> Self {
        Self {
            op: ce::COPY,
            flags: ce::SRC_VRAM | ce::DST_VRAM,
            src: src as u64,
            dst: dst as u64,
            len: len as u64,
        }
    }

    /// Zeroes `len` bytes at VRAM offset `dst`.
    pub(crate) fn zero_vram(dst: usize, len: usize) -> Self {
        Self {
            op: ce::FILL,
            flags: ce::DST_VRAM,
            src: 0,
            dst: dst as u64,
            len: len as u64,
        }
    }

    /// A command the engine refuses (an unknown opcode: BAD_COMMAND),
    /// for fault injection.
    pub(crate) fn malformed() -> Self {
        Self {
            op: 0xbad,
            flags: 0,
            src: 0,
            dst: 0,
            len: 0,
        }
    }

    /// `next` appended to `self`, if it continues it (same kind, both
    /// ends contiguous): one command for both.
    pub(crate) fn merge(&self, next: &Self) -> Option<Self> {
        let src_follows = match self.op {
            ce::FILL => next.src == self.src,
            _ => self.src.checked_add(self.len) == Some(next.src),
        };
        (next.op == self.op
            && next.flags == self.flags
            && src_follows
            && self.dst.checked_add(self.len) == Some(next.dst))
        .then(|| Self {
            len: self.len + next.len,
            ..*self
        })
    }
}

#[kunit_tests(msvm_gpu_copy)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_commands_merge() {
        let a = Command::to_vram(0x1000, 0x2000, 4096);
        let b = Command::to_vram(0x2000, 0x3000, 4096);
        assert_eq!(a.merge(&b), Some(Command::to_vram(0x1000, 0x2000, 8192)));
        // Either end not contiguous, or another direction: no merge.
        assert_eq!(a.merge(&Command::to_vram(0x3000, 0x3000, 4096)), None);
        assert_eq!(a.merge(&Command::to_vram(0x2000, 0x4000, 4096)), None);
        assert_eq!(a.merge(&Command::from_vram(0x3000, 0x2000, 4096)), None);
        // Fills merge on the destination alone (the pattern is the same).
        let z = Command::zero_vram(0, 4096);
        assert_eq!(
            z.merge(&Command::zero_vram(4096, 4096)),
            Some(Command::zero_vram(0, 8192))
        );
        assert_eq!(z.merge(&Command::zero_vram(8192, 4096)), None);
    }
}
