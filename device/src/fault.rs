// SPDX-License-Identifier: GPL-2.0

//! Replayable faults (Documentation/hardware.rst, "Fault buffer"): a job
//! access the MMU cannot translate writes a fault record into a ring of
//! records in system memory that the driver gives by DMA address, raises
//! FAULT, and stalls the job engine until the driver replays the access
//! (after writing the entries it lacked) or cancels the job. A record the
//! buffer has no room for is not written: OVERFLOW says so, and the access
//! faults again when replayed, so no fault is lost.

/// Offset of the fault buffer's registers in BAR0.
pub const BASE: u64 = 0x340;
/// Bytes of its register block.
pub const SIZE: u64 = 0x40;

/// Registers, as offsets in BAR0.
pub mod reg {
    /// The buffer, a DMA address, 4 KiB aligned: low word.
    pub const BUF_LO: u64 = 0x340;
    /// High word.
    pub const BUF_HI: u64 = 0x344;
    /// Records the buffer holds: a power of two up to [`super::MAX_RECORDS`];
    /// 0: replayable faults off (a miss fails the job with PAGE_FAULT).
    pub const BUF_SIZE: u64 = 0x348;
    /// Records written since the buffer was set (free-running; the next
    /// goes to `PUT % BUF_SIZE`). Read-only.
    pub const PUT: u64 = 0x34c;
    /// Records the driver has consumed (free-running).
    pub const GET: u64 = 0x350;
    /// [`super::status`] bits.
    pub const STATUS: u64 = 0x354;
    /// Write [`super::REPLAY`] or [`super::CANCEL`] to end the stall.
    pub const CTRL: u64 = 0x358;
    /// Records written, low 32 bits (read-only).
    pub const FAULTS: u64 = 0x35c;
    /// Faults the buffer had no room for (read-only).
    pub const OVERFLOWS: u64 = 0x360;
    /// Replays (read-only).
    pub const REPLAYS: u64 = 0x364;
    /// Cancels (read-only).
    pub const CANCELS: u64 = 0x368;
}

/// `STATUS` bits.
pub mod status {
    /// A job waits for a replay or a cancel (read-only).
    pub const STALLED: u32 = 1 << 0;
    /// A fault found the buffer full; write 1 to clear.
    pub const OVERFLOW: u32 = 1 << 1;
}

/// `CTRL`: the stalled job retries the access that faulted.
pub const REPLAY: u32 = 1;
/// `CTRL`: the stalled job ends, cancelled (its completion record says so).
pub const CANCEL: u32 = 2;

/// Most records a buffer holds.
pub const MAX_RECORDS: u32 = 4096;
/// Bytes of a record.
pub const RECORD_LEN: usize = 32;

/// The access that faulted.
pub mod access {
    pub const READ: u8 = 0;
    pub const WRITE: u8 = 1;
    pub const ATOMIC: u8 = 2;
}

/// The engine that faulted.
pub const ENGINE_JOB: u8 = 1;

/// A fault record, as it lies in the buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The virtual address that faulted.
    pub addr: u64,
    /// The faulting job's seqno.
    pub seqno: u64,
    /// Its context.
    pub ctx: u32,
    /// One of [`access`].
    pub access: u8,
    /// [`ENGINE_JOB`].
    pub engine: u8,
    /// Bytes of the job done before the faulting access.
    pub done: u64,
}

impl Record {
    /// Its bytes in the buffer.
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut b = [0; RECORD_LEN];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.seqno.to_le_bytes());
        b[16..20].copy_from_slice(&self.ctx.to_le_bytes());
        b[20] = self.access;
        b[21] = self.engine;
        b[24..32].copy_from_slice(&self.done.to_le_bytes());
        b
    }

    /// Decodes a record.
    pub fn decode(b: &[u8; RECORD_LEN]) -> Self {
        let u64_at = |o: usize| {
            let mut w = [0; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(w)
        };
        Self {
            addr: u64_at(0),
            seqno: u64_at(8),
            ctx: u32::from_le_bytes([b[16], b[17], b[18], b[19]]),
            access: b[20],
            engine: b[21],
            done: u64_at(24),
        }
    }
}

/// How a stall ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Retry the access.
    Replay,
    /// End the job, cancelled.
    Cancel,
    /// Replayable faults are off: the job fails with PAGE_FAULT.
    Off,
    /// The engine was reset or the device stopped: the job ends, unfenced.
    Reset,
}

/// Where a fault's record goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Faults are off, or the buffer is malformed (a size not a power of
    /// two, an unaligned base).
    Off,
    /// The buffer is full: OVERFLOW is set, no record is written.
    Full,
    /// At this DMA address.
    At(u64),
}

/// The fault buffer's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub faults: u64,
    pub overflows: u64,
    pub replays: u64,
    pub cancels: u64,
}

/// The fault buffer's registers and the stall (under the device's lock).
#[derive(Default)]
pub struct Regs {
    buf: u64,
    size: u32,
    put: u32,
    get: u32,
    overflow: bool,
    stalled: bool,
    /// The driver's answer to the stall, not yet taken.
    answer: Option<Resolution>,
    pub counts: Counts,
}

impl Regs {
    /// The register at `off` (a multiple of 4 in the block).
    pub fn read32(&self, off: u64) -> u32 {
        match off {
            reg::BUF_LO => self.buf as u32,
            reg::BUF_HI => (self.buf >> 32) as u32,
            reg::BUF_SIZE => self.size,
            reg::PUT => self.put,
            reg::GET => self.get,
            reg::STATUS => {
                (if self.stalled { status::STALLED } else { 0 })
                    | if self.overflow { status::OVERFLOW } else { 0 }
            }
            reg::FAULTS => self.counts.faults as u32,
            reg::OVERFLOWS => self.counts.overflows as u32,
            reg::REPLAYS => self.counts.replays as u32,
            reg::CANCELS => self.counts.cancels as u32,
            _ => 0,
        }
    }

    /// Writes the register at `off`; returns whether the stall ended (the
    /// job engine's thread must look).
    pub fn write32(&mut self, off: u64, v: u32) -> bool {
        match off {
            reg::BUF_LO => self.buf = (self.buf & !0xffff_ffff) | u64::from(v),
            reg::BUF_HI => self.buf = (self.buf & 0xffff_ffff) | (u64::from(v) << 32),
            reg::BUF_SIZE => {
                // A new buffer starts empty.
                self.size = v;
                self.put = 0;
                self.get = 0;
            }
            reg::GET => self.get = v,
            reg::STATUS if v & status::OVERFLOW != 0 => self.overflow = false,
            // The answer ends the stall at once (STALLED reads 0 from
            // here on, so a driver never answers one stall twice); the
            // job engine's thread takes it.
            reg::CTRL if self.stalled => {
                let answer = match v {
                    REPLAY => {
                        self.counts.replays += 1;
                        Resolution::Replay
                    }
                    CANCEL => {
                        self.counts.cancels += 1;
                        Resolution::Cancel
                    }
                    _ => return false,
                };
                self.stalled = false;
                self.answer = Some(answer);
                return true;
            }
            _ => {}
        }
        false
    }

    /// A fault: where its record goes.
    pub fn slot(&mut self) -> Slot {
        let n = self.size;
        if n == 0 || n > MAX_RECORDS || !n.is_power_of_two() || self.buf % 4096 != 0 {
            return Slot::Off;
        }
        if self.put.wrapping_sub(self.get) >= n {
            self.overflow = true;
            self.counts.overflows += 1;
            return Slot::Full;
        }
        let at = u64::from(self.put % n) * RECORD_LEN as u64;
        self.buf.checked_add(at).map_or(Slot::Off, Slot::At)
    }

    /// The record at the [`Slot`] [`Regs::slot`] gave is written: it is
    /// published, and the job stalls.
    pub fn published(&mut self, written: bool) {
        if written {
            self.put = self.put.wrapping_add(1);
            self.counts.faults += 1;
        }
        self.stalled = true;
        self.answer = None;
    }

    /// The driver's answer, if it came.
    pub fn take_answer(&mut self) -> Option<Resolution> {
        self.answer.take()
    }

    /// The stall ends without an answer (a reset, the device stopping).
    pub fn abandon(&mut self) {
        self.stalled = false;
        self.answer = None;
    }

    /// Back to reset values but for the counters: faults off.
    pub fn reset(&mut self) {
        *self = Self {
            counts: self.counts,
            ..Self::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let r = Record {
            addr: 0x7f00_1234_5000,
            seqno: 9,
            ctx: 3,
            access: access::ATOMIC,
            engine: ENGINE_JOB,
            done: 8192,
        };
        assert_eq!(Record::decode(&r.encode()), r);
    }

    #[test]
    fn a_full_buffer_overflows_until_consumed() {
        let mut f = Regs::default();
        assert_eq!(f.slot(), Slot::Off, "off by default");
        f.write32(reg::BUF_LO, 0x10_0000);
        f.write32(reg::BUF_SIZE, 2);
        assert_eq!(f.slot(), Slot::At(0x10_0000));
        f.published(true);
        assert_eq!(f.slot(), Slot::At(0x10_0020));
        f.published(true);
        assert_eq!(f.slot(), Slot::Full);
        f.published(false);
        assert_eq!(f.read32(reg::STATUS), status::STALLED | status::OVERFLOW);
        assert_eq!(f.read32(reg::PUT), 2);
        assert_eq!(f.counts.overflows, 1);
        // Consumed: the next record wraps to the first slot.
        f.write32(reg::GET, 2);
        f.write32(reg::STATUS, status::OVERFLOW);
        assert_eq!(f.slot(), Slot::At(0x10_0000));
        // A misaligned buffer or a size not a power of two: off.
        f.write32(reg::BUF_SIZE, 3);
        assert_eq!(f.slot(), Slot::Off);
    }

    #[test]
    fn only_a_stall_takes_an_answer() {
        let mut f = Regs::default();
        assert!(!f.write32(reg::CTRL, REPLAY), "no stall: ignored");
        f.published(false);
        assert!(!f.write32(reg::CTRL, 7), "not a command");
        assert!(f.write32(reg::CTRL, CANCEL));
        // Answered: no longer stalled, a second answer is ignored.
        assert_eq!(f.read32(reg::STATUS), 0);
        assert!(!f.write32(reg::CTRL, REPLAY));
        assert_eq!(f.take_answer(), Some(Resolution::Cancel));
        assert_eq!(f.take_answer(), None);
        assert_eq!((f.counts.cancels, f.counts.replays), (1, 0));
    }
}
