// SPDX-License-Identifier: GPL-2.0

//! msvm-gpu's copy engine (Documentation/hardware.rst, "Copy engine"): a
//! [`Queue`] of copy commands, which migrations use (`crate::vram::Blit`),
//! and what it counts.

use kernel::{
    device::Bound,
    pci,
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
};

use super::regs::{ce, CopyBlock};
use super::ring::{Engine, Queue, COMMAND_WORDS};

mod command;
mod selftest;

pub(crate) use super::ring::RunError;
pub(crate) use command::Command;

/// The copy engine's counters (debugfs `copy_engine`).
pub(crate) struct CopyStats {
    /// Bytes copied into VRAM, out of it, and zeroed in it.
    pub(crate) bytes_in: Atomic<u64>,
    pub(crate) bytes_out: Atomic<u64>,
    pub(crate) bytes_zeroed: Atomic<u64>,
    /// Bytes copied from VRAM to VRAM.
    pub(crate) bytes_within: Atomic<u64>,
    /// Of `bytes_in`, those read from a peer's VRAM over P2P.
    pub(crate) bytes_p2p: Atomic<u64>,
}

impl Engine for CopyBlock {
    const NAME: &'static str = "copy engine";
    const SCRATCH: usize = 0;
    type Command = Command;
    type Stats = CopyStats;

    fn stats() -> CopyStats {
        CopyStats {
            bytes_in: Atomic::new(0),
            bytes_out: Atomic::new(0),
            bytes_zeroed: Atomic::new(0),
            bytes_within: Atomic::new(0),
            bytes_p2p: Atomic::new(0),
        }
    }

    fn encode(c: &Command, seqno: u64, last: bool) -> [u64; COMMAND_WORDS] {
        let flags = c.flags | if last { ce::INTERRUPT } else { 0 };
        [
            u64::from(c.op) | (u64::from(flags) << 32),
            seqno,
            c.src,
            c.dst,
            c.len,
            0,
            0,
            0,
        ]
    }

    fn count(s: &CopyStats, cmds: &[Command]) {
        for c in cmds {
            let n = match (c.op, c.flags & (ce::SRC_VRAM | ce::DST_VRAM)) {
                (ce::FILL, _) => &s.bytes_zeroed,
                (_, ce::SRC_VRAM) => &s.bytes_out,
                (_, ce::DST_VRAM) => &s.bytes_in,
                (_, f) if f == ce::SRC_VRAM | ce::DST_VRAM => &s.bytes_within,
                // System RAM to system RAM: never submitted.
                _ => &s.bytes_in,
            };
            n.add(c.len, Relaxed);
        }
    }
}

/// The copy engine of an msvm-gpu.
pub(crate) type CopyEngine = Queue<CopyBlock>;

impl CopyEngine {
    /// The probe's self-test (`selftest.rs`).
    pub(crate) fn selftest(&self, pdev: &pci::Device<Bound>) -> Result {
        selftest::round_trip(self, pdev)
    }
}
