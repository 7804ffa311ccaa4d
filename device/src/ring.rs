// SPDX-License-Identifier: GPL-2.0

//! A command ring, as both engines have one (Documentation/hardware.rst,
//! "Rings"): its registers, relative to the engine's block in BAR0, and
//! its progress. Commands are 64 bytes in memory the driver gives by DMA
//! address; `TAIL` is the doorbell; each completed command's seqno is
//! written to the fence; an error halts the ring until `CTRL` resets it.

/// Registers, as offsets in an engine's block.
pub mod reg {
    /// Ring base, a DMA address, 4 KiB aligned: low word.
    pub const RING_LO: u64 = 0x00;
    /// Ring base: high word.
    pub const RING_HI: u64 = 0x04;
    /// Ring entries: a power of two from 2 to 4096.
    pub const RING_SIZE: u64 = 0x08;
    /// The entry the engine executes next (read-only).
    pub const HEAD: u64 = 0x0c;
    /// The doorbell: the entry after the last one the driver wrote.
    pub const TAIL: u64 = 0x10;
    /// Fence, a DMA address the engine writes each completed seqno to
    /// (8 bytes, little-endian; 0: none): low word.
    pub const FENCE_LO: u64 = 0x14;
    /// Fence: high word.
    pub const FENCE_HI: u64 = 0x18;
    /// [`super::status`] bits (read-only).
    pub const STATUS: u64 = 0x1c;
    /// The error that halted the engine, one of [`super::error`].
    pub const ERROR: u64 = 0x20;
    /// The seqno of the command that halted it: low word.
    pub const ERROR_SEQNO_LO: u64 = 0x24;
    /// High word.
    pub const ERROR_SEQNO_HI: u64 = 0x28;
    /// Writing [`super::CTRL_RESET`] resets the engine.
    pub const CTRL: u64 = 0x2c;
    /// Commands completed since the engine's reset: low word.
    pub const DONE_LO: u64 = 0x30;
    /// High word.
    pub const DONE_HI: u64 = 0x34;
    /// The address the error concerns (a job's virtual address for
    /// PAGE_FAULT and STALE_TLB; 0 if none): low word.
    pub const ERROR_ADDR_LO: u64 = 0x38;
    /// High word.
    pub const ERROR_ADDR_HI: u64 = 0x3c;
}

/// Bytes of an engine's register block.
pub const SIZE: u64 = 0x40;

/// `STATUS` bits.
pub mod status {
    /// No command to run (`HEAD == TAIL`) and none running.
    pub const IDLE: u32 = 1 << 0;
    /// Halted by an error until reset.
    pub const HALTED: u32 = 1 << 1;
}

/// `CTRL`: reset: no error, `HEAD` and `TAIL` 0, the counter 0.
pub const CTRL_RESET: u32 = 1 << 0;

/// `ERROR` codes, the same for every engine.
pub mod error {
    /// `RING_SIZE` is not a power of two from 2 to 4096, the ring base is
    /// not 4 KiB aligned, or `TAIL` is past the ring.
    pub const BAD_RING: u32 = 1;
    /// An opcode, flag or field the engine does not take.
    pub const BAD_COMMAND: u32 = 2;
    /// A DMA address outside the device's DMA space, an access the space
    /// forbids, bus mastering off, or a transfer QEMU failed.
    pub const DMA_FAULT: u32 = 3;
    /// A VRAM range past the end of VRAM (a command's, or one a page-table
    /// entry names).
    pub const VRAM_RANGE: u32 = 4;
    /// A job's virtual address with no valid entry, or without the
    /// permission the access needs.
    pub const PAGE_FAULT: u32 = 5;
    /// Checking mode: a TLB translation that the page table in VRAM no
    /// longer holds (a missed TLB invalidation).
    pub const STALE_TLB: u32 = 6;
    /// A job's context past `MMU_CTX_COUNT`, or whose entry is not valid.
    pub const BAD_CONTEXT: u32 = 7;
    /// The job ran past the job engine's watchdog (`JOB_WATCHDOG`).
    pub const WATCHDOG: u32 = 8;
}

/// Why a command failed: an [`error`] code, and the address concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// One of [`error`] (0: the engine was reset meanwhile).
    pub code: u32,
    /// The address concerned, or 0.
    pub addr: u64,
}

impl Fault {
    /// A fault of `code` at no address.
    pub fn code(code: u32) -> Self {
        Self { code, addr: 0 }
    }
}

/// Why the ring halted.
#[derive(Clone, Copy, Debug)]
struct Halt {
    fault: Fault,
    seqno: u64,
}

/// The ring's registers and progress.
#[derive(Default)]
pub struct State {
    ring: u64,
    ring_size: u32,
    head: u32,
    tail: u32,
    fence: u64,
    /// Set while halted.
    halted: Option<Halt>,
    running: bool,
    done: u64,
    /// Bumped by every reset: a command started before it completes into nothing.
    gen: u64,
}

/// What the engine is to run next.
pub struct Work {
    /// DMA address of the entry.
    pub entry: u64,
    /// The fence address (0: none).
    pub fence: u64,
    /// The engine's generation when it started.
    pub gen: u64,
}

/// Bytes of a command.
pub const COMMAND_LEN: usize = 64;

impl State {
    /// The register at `off` (relative to the block, a multiple of 4).
    pub fn read32(&self, off: u64) -> u32 {
        let h = self.halted;
        match off {
            reg::RING_LO => self.ring as u32,
            reg::RING_HI => (self.ring >> 32) as u32,
            reg::RING_SIZE => self.ring_size,
            reg::HEAD => self.head,
            reg::TAIL => self.tail,
            reg::FENCE_LO => self.fence as u32,
            reg::FENCE_HI => (self.fence >> 32) as u32,
            reg::STATUS => {
                let idle = self.head == self.tail && !self.running;
                (if idle { status::IDLE } else { 0 })
                    | (if h.is_some() { status::HALTED } else { 0 })
            }
            reg::ERROR => h.map_or(0, |h| h.fault.code),
            reg::ERROR_SEQNO_LO => h.map_or(0, |h| h.seqno as u32),
            reg::ERROR_SEQNO_HI => h.map_or(0, |h| (h.seqno >> 32) as u32),
            reg::DONE_LO => self.done as u32,
            reg::DONE_HI => (self.done >> 32) as u32,
            reg::ERROR_ADDR_LO => h.map_or(0, |h| h.fault.addr as u32),
            reg::ERROR_ADDR_HI => h.map_or(0, |h| (h.fault.addr >> 32) as u32),
            _ => 0,
        }
    }

    /// Writes the register at `off` (relative); returns whether the
    /// engine may have work now (a doorbell or a reset).
    pub fn write32(&mut self, off: u64, v: u32) -> bool {
        let lo = |x: u64| (x & !0xffff_ffff) | u64::from(v);
        let hi = |x: u64| (x & 0xffff_ffff) | (u64::from(v) << 32);
        match off {
            reg::RING_LO => self.ring = lo(self.ring),
            reg::RING_HI => self.ring = hi(self.ring),
            reg::RING_SIZE => self.ring_size = v,
            reg::TAIL => {
                self.tail = v;
                return true;
            }
            reg::FENCE_LO => self.fence = lo(self.fence),
            reg::FENCE_HI => self.fence = hi(self.fence),
            reg::CTRL if v & CTRL_RESET != 0 => {
                self.head = 0;
                self.tail = 0;
                self.halted = None;
                self.done = 0;
                self.gen = self.gen.wrapping_add(1);
                return true;
            }
            _ => {}
        }
        false
    }

    /// Whether the engine has a command to start.
    pub fn has_work(&self) -> bool {
        self.halted.is_none() && self.head != self.tail
    }

    /// Starts the next command, or halts the engine with BAD_RING.
    pub fn start(&mut self) -> Result<Work, u32> {
        let n = self.ring_size;
        let bad = !(2..=4096).contains(&n)
            || !n.is_power_of_two()
            || self.ring % 4096 != 0
            || self.tail >= n
            || self.head >= n;
        let entry = self
            .ring
            .checked_add(u64::from(self.head) * COMMAND_LEN as u64);
        let Some(entry) = entry.filter(|_| !bad) else {
            self.halted = Some(Halt {
                fault: Fault::code(error::BAD_RING),
                seqno: 0,
            });
            return Err(error::BAD_RING);
        };
        self.running = true;
        Ok(Work {
            entry,
            fence: self.fence,
            gen: self.gen,
        })
    }

    /// Whether `gen` is still the engine's generation.
    pub fn current(&self, gen: u64) -> bool {
        self.gen == gen
    }

    /// After a device reset: registers to reset values; a command under
    /// way still shows (not IDLE) until it stops, and completes into nothing.
    pub fn reset(&mut self) {
        *self = State {
            running: self.running,
            gen: self.gen.wrapping_add(1),
            ..State::default()
        };
    }

    /// The running command completed.
    pub fn complete(&mut self, gen: u64) -> bool {
        self.running = false;
        if gen != self.gen {
            return false;
        }
        self.head = (self.head + 1) % self.ring_size.max(1);
        self.done += 1;
        true
    }

    /// The running command, `seqno`, failed: the engine halts there.
    pub fn fail(&mut self, gen: u64, fault: Fault, seqno: u64) -> bool {
        self.running = false;
        if gen != self.gen {
            return false;
        }
        self.halted = Some(Halt { fault, seqno });
        true
    }
}
