// SPDX-License-Identifier: GPL-2.0

//! msvm-gpu's fault buffer, as msvm drives it (Documentation/hardware.rst,
//! "Fault buffer"): a job access the device cannot translate writes a
//! record here and raises FAULT, and the job engine stalls until msvm
//! replays the access or cancels the job ([`Answer`]).
//!
//! The job engine runs one job at a time, its submitter's
//! (`super::ring::Session`), so every record is that job's: its submitter
//! takes the records when the interrupt wakes it ([`FaultBuffer::take`]),
//! services them with the device parked (`super::ring::Parked`: its ring
//! lock free, the VM's mirror lock too), and answers.
//! A fault the buffer had no room for is not lost: OVERFLOW says so, and
//! the replayed access faults again, into the room the take made.

use kernel::{
    dma::Coherent,
    io::{io_read, Io},
    pci,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Relaxed, Release},
        Arc,
    },
};

use super::regs::{
    fault, JobBlock, FAULT_BUF_HI, FAULT_BUF_LO, FAULT_BUF_SIZE, FAULT_CTRL, FAULT_GET, FAULT_PUT,
    FAULT_STATUS,
};
use super::ring::{Regs, Runner};

/// Records the buffer holds: a page of them.
const RECORDS: u32 = 128;
/// Words of a record.
const RECORD_WORDS: usize = 4;

/// The access that faulted (a record's byte 20).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultAccess {
    Read,
    Write,
    Atomic,
}

/// A fault record (hardware.rst, "Fault buffer").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FaultRecord {
    /// The virtual address that faulted.
    pub(crate) addr: u64,
    /// The faulting job's seqno and context.
    pub(crate) seqno: u64,
    pub(crate) ctx: u32,
    pub(crate) access: FaultAccess,
    /// Bytes of the job done before the faulting access.
    pub(crate) done: u64,
}

impl FaultRecord {
    /// Decodes a record's four words; `None` if its access or engine is
    /// not one this driver knows.
    fn decode(w: [u64; RECORD_WORDS]) -> Option<Self> {
        let access = match (w[2] >> 32) & 0xff {
            0 => FaultAccess::Read,
            1 => FaultAccess::Write,
            2 => FaultAccess::Atomic,
            _ => return None,
        };
        // The job engine's (the only one that faults).
        if (w[2] >> 40) & 0xff != 1 {
            return None;
        }
        Some(Self {
            addr: w[0],
            seqno: w[1],
            ctx: w[2] as u32,
            access,
            done: w[3],
        })
    }
}

/// What a stall is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// The newest record of the stalled job (an older one was replayed
    /// already).
    Record(FaultRecord),
    /// A fault that found the buffer full: consumed and cleared now, it is
    /// recorded when replayed.
    Overflow,
    /// No record (a device that stalls for nothing, or is gone).
    Nothing,
}

/// How msvm ends a stall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The access is retried (its entries are written now).
    Replay,
    /// The job ends where it stalled, cancelled.
    Cancel,
}

/// The fault buffer's counters (debugfs `job_engine`).
pub(crate) struct FaultStats {
    /// Stalls taken.
    pub(crate) stalls: Atomic<u64>,
    /// Records taken.
    pub(crate) records: Atomic<u64>,
    /// Overflows seen (each cleared, its fault replayed to be recorded).
    pub(crate) overflows: Atomic<u64>,
    /// Replays and cancels written.
    pub(crate) replays: Atomic<u64>,
    pub(crate) cancels: Atomic<u64>,
}

/// The fault buffer of one msvm-gpu.
///
/// # Invariants
///
/// The device's `FAULT_BUF*` registers name `buf` for as long as the
/// device is bound.
pub(crate) struct FaultBuffer {
    bar: Arc<Regs>,
    buf: Coherent<[u64]>,
    /// Records consumed (`FAULT_GET`'s value).
    get: Atomic<u32>,
    /// FAULT was raised since the last take: only then is `FAULT_STATUS`
    /// read (a register read is a round trip to the device).
    raised: Atomic<bool>,
    pub(crate) stats: FaultStats,
}

impl FaultBuffer {
    /// The fault buffer of the device behind `bar`, named to the device
    /// (replayable faults on). The device writes no record once it is
    /// unbound (disabled, bus mastering with it); the buffer is freed with
    /// the last reference after that.
    pub(super) fn new(pdev: &pci::Device<kernel::device::Bound>, bar: Arc<Regs>) -> Result<Self> {
        let words = RECORDS as usize * RECORD_WORDS;
        let buf: Coherent<[u64]> = Coherent::zeroed_slice(pdev.as_ref(), words, GFP_KERNEL)?;
        {
            let base = buf.dma_address();
            let io = bar.access(pdev.as_ref())?;
            io.write_reg(FAULT_BUF_LO::zeroed().with_value(base as u32));
            io.write_reg(FAULT_BUF_HI::zeroed().with_value((base >> 32) as u32));
            // Written last: a new buffer starts empty (`PUT`, `GET` 0).
            io.write_reg(FAULT_BUF_SIZE::zeroed().with_value(RECORDS));
        }
        // INVARIANT: the registers name `buf`.
        Ok(Self {
            bar,
            buf,
            get: Atomic::new(0),
            raised: Atomic::new(false),
            stats: FaultStats {
                stalls: Atomic::new(0),
                records: Atomic::new(0),
                overflows: Atomic::new(0),
                replays: Atomic::new(0),
                cancels: Atomic::new(0),
            },
        })
    }

    /// FAULT was raised (the interrupt handler).
    pub(super) fn note_raised(&self) {
        self.raised.store(true, Release);
    }

    /// Forgets a FAULT no job raised (the probe's self-test).
    pub(super) fn forget_raised(&self) {
        self.raised.store(false, Relaxed);
    }

    /// Whether the job engine stalls on a fault (`false` if the device is
    /// gone). The device raises FAULT after it stalls: without it since the
    /// last take, no register is read.
    pub(crate) fn stalled(&self) -> bool {
        if !self.raised.load(Acquire) {
            return false;
        }
        self.bar.try_access().is_some_and(|io| {
            let s = io.read(FAULT_STATUS);
            s.into_raw() != u32::MAX && s.stalled()
        })
    }

    /// Takes the records written since the last take: what the stall of
    /// job `seqno` is for. Called by the job engine's session holder,
    /// while the engine stalls.
    pub(crate) fn take(&self, _jobs: &Runner<'_, JobBlock>, seqno: u64) -> Taken {
        self.stats.stalls.add(1, Relaxed);
        // This stall's FAULT was handled (it made `stalled` look); the next
        // stall raises it again.
        self.raised.store(false, Relaxed);
        let Some(io) = self.bar.try_access() else {
            return Taken::Nothing;
        };
        let put = io.read(FAULT_PUT).value();
        let put = u32::from(put);
        let mut get = self.get.load(Relaxed);
        let mut newest = None;
        let word = |i: usize| -> Result<u64> { Ok(io_read!(self.buf, [try: i])) };
        // A device that writes more than it holds is not believed past
        // the buffer's size.
        if put.wrapping_sub(get) > RECORDS {
            get = put.wrapping_sub(RECORDS);
        }
        while get != put {
            let at = (get % RECORDS) as usize * RECORD_WORDS;
            let mut w = [0u64; RECORD_WORDS];
            for (k, v) in w.iter_mut().enumerate() {
                *v = word(at + k).unwrap_or(0);
            }
            self.stats.records.add(1, Relaxed);
            if let Some(r) = FaultRecord::decode(w).filter(|r| r.seqno == seqno) {
                newest = Some(r);
            }
            get = get.wrapping_add(1);
        }
        self.get.store(get, Relaxed);
        io.write_reg(FAULT_GET::zeroed().with_value(get));
        let overflow = io.read(FAULT_STATUS).overflow();
        if overflow {
            io.write_reg(FAULT_STATUS::zeroed().with_overflow(true));
            self.stats.overflows.add(1, Relaxed);
        }
        match newest {
            Some(r) => Taken::Record(r),
            None if overflow => Taken::Overflow,
            None => Taken::Nothing,
        }
    }

    /// Answers the job engine's stall.
    ///
    /// # Safety
    ///
    /// As [`Runner::run`] for the stalled job: on a replay, every entry of
    /// the page tables it uses is a live mapping it may reach (the TLB
    /// invalidated for every change since it stalled), and stays so until
    /// the job completes or stalls again.
    pub(crate) unsafe fn answer(&self, _jobs: &mut Runner<'_, JobBlock>, answer: Answer) -> Result {
        let io = self.bar.try_access().ok_or(ENODEV)?;
        let (v, n) = match answer {
            Answer::Replay => (fault::REPLAY, &self.stats.replays),
            Answer::Cancel => (fault::CANCEL, &self.stats.cancels),
        };
        io.write_reg(FAULT_CTRL::zeroed().with_value(v));
        n.add(1, Relaxed);
        Ok(())
    }
}
