// SPDX-License-Identifier: GPL-2.0

//! msvm-gpu's copy engine (Documentation/hardware.rst, "Copy engine"): the
//! ring msvm owns while the device is bound, commands written into it, the
//! doorbell, and the fence waited for by interrupt.
//!
//! # Lock order
//!
//! [`CopyEngine::ring`] (a mutex: one submitter at a time, from a
//! migration step under an mmap lock, a shrink pass or a teardown) ->
//! [`CopyEngine::wake`] (a spinlock with interrupts off, which the
//! interrupt handler takes alone to wake the waiter). Nothing is allocated
//! under `ring`: a shrinker's page moves take it.

use kernel::{
    device::{self, Bound},
    devres,
    dma::Coherent,
    io::{io_read, io_write, Io},
    new_condvar, new_mutex, new_spinlock_irq, pci,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
        barrier::{dma_mb, Read},
        Arc, CondVar, CondVarTimeoutResult, Mutex, MutexGuard, SpinLockIrq,
    },
    time::{delay::fsleep, msecs_to_jiffies, Delta, Instant, Monotonic},
};

use super::regs::{
    self, ce, CE_CTRL, CE_DONE_HI, CE_DONE_LO, CE_ERROR, CE_ERROR_SEQNO_HI, CE_ERROR_SEQNO_LO,
    CE_FENCE_HI, CE_FENCE_LO, CE_RING_HI, CE_RING_LO, CE_RING_SIZE, CE_STATUS, CE_TAIL, IRQ_ENABLE,
};

mod command;
mod selftest;

pub(crate) use command::Command;

/// Entries of the ring; one submission puts at most `RING - 1` commands in
/// it (a full ring would look empty: `CE_HEAD == CE_TAIL`).
pub(crate) const RING: usize = 1024;
/// Words of the engine's buffer: the ring, then the fence (one word).
const WORDS: usize = RING * ce::COMMAND / 8 + 1;
/// The fence's word in the buffer.
const FENCE: usize = RING * ce::COMMAND / 8;
/// How long a submission may take before the engine is reset: longer than
/// the device waits for QEMU to serve one transfer (10 s); a ring of
/// copies runs in well under a second even under TCG.
const WAIT_MS: i64 = 15_000;
/// How long a reset engine may take to stop (see [`WAIT_MS`]).
const STOP_MS: i64 = 12_000;

/// The ring's state, under [`CopyEngine::ring`].
struct Ring {
    /// The ring and the fence; `None` once given up to an engine that
    /// never stopped (leaked: no later owner of its pages sees the device
    /// write).
    buf: Option<Coherent<[u64]>>,
    /// The entry after the last one written (`CE_TAIL`).
    tail: usize,
    /// The last seqno given.
    seqno: u64,
}

/// The copy engine's counters (debugfs `copy_engine`).
pub(crate) struct CopyStats {
    /// Submissions run to their fence.
    pub(crate) runs: Atomic<u64>,
    /// Commands completed.
    pub(crate) commands: Atomic<u64>,
    /// Bytes copied into VRAM, out of it, and zeroed in it.
    pub(crate) bytes_in: Atomic<u64>,
    pub(crate) bytes_out: Atomic<u64>,
    pub(crate) bytes_zeroed: Atomic<u64>,
    /// Bytes copied from VRAM to VRAM.
    pub(crate) bytes_within: Atomic<u64>,
    /// Of `bytes_in`, those read from a peer's VRAM over P2P.
    pub(crate) bytes_p2p: Atomic<u64>,
    /// Waits that slept until the interrupt woke them.
    pub(crate) woken: Atomic<u64>,
    /// Submissions that failed (an error, a timeout), each followed by a
    /// reset.
    pub(crate) failed: Atomic<u64>,
}

impl CopyStats {
    fn new() -> Self {
        Self {
            runs: Atomic::new(0),
            commands: Atomic::new(0),
            bytes_in: Atomic::new(0),
            bytes_out: Atomic::new(0),
            bytes_zeroed: Atomic::new(0),
            bytes_within: Atomic::new(0),
            bytes_p2p: Atomic::new(0),
            woken: Atomic::new(0),
            failed: Atomic::new(0),
        }
    }
}

/// msvm-gpu's copy engine, for as long as its device is bound: a ring of
/// [`RING`] entries and a fence in memory from the DMA API, waited for by
/// the COMPLETION interrupt (`super::irq`).
///
/// # Invariants
///
/// While [`Ring::buf`] is `Some`, the engine's `CE_RING*` and `CE_FENCE*`
/// registers name it, and whenever `ring` is not held the engine has no
/// command left to read.
#[pin_data]
pub(crate) struct CopyEngine {
    bar: pci::DevresBar<{ regs::END }>,
    dev: ARef<device::Device>,
    #[pin]
    ring: Mutex<Ring>,
    #[pin]
    wake: SpinLockIrq<()>,
    #[pin]
    done: CondVar,
    /// The engine did not stop after a reset, or the device is going: no
    /// submission runs.
    lost: Atomic<bool>,
    pub(crate) stats: CopyStats,
}

/// Why a run did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunError {
    /// The engine failed (an error, a timeout) and was reset: it is idle
    /// and touches nothing it was given again.
    Failed,
    /// The engine did not stop, or the device does not answer: it may
    /// still read or write anything it was given, which must be kept (never
    /// freed, never unmapped) for good. The engine is not used again.
    Lost,
}

/// What a failed submission saw.
enum Failure {
    /// Halted with `code` at `seqno` (hardware.rst's error codes).
    Halted { code: u32, seqno: u64 },
    /// No fence after [`WAIT_MS`], at `fence`.
    Timeout { fence: u64 },
    /// The device is not there (unbound, or its BAR reads all ones).
    Gone,
}

impl CopyEngine {
    /// Sets up the engine of the device behind `bar`: a reset (an error if
    /// the engine does not stop: a binding before may have left it
    /// running), then its ring and fence in a new buffer. COMPLETION is not
    /// enabled yet (the interrupt handler needs the engine:
    /// [`super::irq::Interrupt`]). The engine is shut down when `pdev` is
    /// unbound, at the latest ([`Stopper`]).
    pub(super) fn new(
        pdev: &pci::Device<Bound>,
        bar: pci::DevresBar<{ regs::END }>,
    ) -> Result<Arc<Self>> {
        {
            let io = bar.access(pdev.as_ref())?;
            io.write_reg(CE_CTRL::zeroed().with_reset(true));
            wait_idle(|| Some(io.read(CE_STATUS).into_raw())).inspect_err(|_| {
                dev_err!(
                    pdev.as_ref(),
                    "msvm-gpu: copy engine still busy {STOP_MS} ms after its reset, or not answering\n"
                )
            })?;
        }
        let buf: Coherent<[u64]> = Coherent::zeroed_slice(pdev.as_ref(), WORDS, GFP_KERNEL)?;
        program(bar.access(pdev.as_ref())?, &buf);
        // INVARIANT: the registers name `buf`, and the reset engine is
        // idle.
        let ce = Arc::pin_init(
            try_pin_init!(Self {
                bar,
                dev: ARef::from(pdev.as_ref()),
                ring <- new_mutex!(Ring { buf: Some(buf), tail: 0, seqno: 0 }, "CopyEngine::ring"),
                wake <- new_spinlock_irq!((), "CopyEngine::wake"),
                done <- new_condvar!("CopyEngine::done"),
                lost: Atomic::new(false),
                stats: CopyStats::new(),
            }? Error),
            GFP_KERNEL,
        )?;
        // Registered after `bar`, released before it: the engine stops
        // while its registers are still mapped.
        devres::register(pdev.as_ref(), Stopper(ce.clone()), GFP_KERNEL)
            .inspect_err(|_| ce.shut_down())?;
        Ok(ce)
    }

    /// The registers, while the device is bound.
    pub(super) fn bar(&self) -> &pci::DevresBar<{ regs::END }> {
        &self.bar
    }

    /// Wakes a submission waiting for its fence (the interrupt handler,
    /// on COMPLETION or ERROR).
    pub(super) fn wake(&self) {
        let _guard = self.wake.lock();
        self.done.notify_all();
    }

    /// Whether submissions run (the engine answered its last reset).
    pub(crate) fn usable(&self) -> bool {
        !self.lost.load(Relaxed)
    }

    /// Takes the engine for a run of submissions ([`Session::run`]):
    /// `ENODEV` once it is lost or shut down. Nothing may be allocated
    /// while the session lasts (see the lock order).
    pub(crate) fn session(&self) -> Result<Session<'_>> {
        let ring = self.ring.lock();
        if !self.usable() {
            return Err(ENODEV);
        }
        // INVARIANT: `ring` is held and the engine not shut down.
        Ok(Session { ce: self, ring })
    }

    /// Runs `cmds` in ring order and returns when the last one has
    /// completed; see [`Runner::run`].
    fn run(&self, ring: &mut Ring, cmds: &[Command]) -> Result<(), RunError> {
        // At most `RING - 2` a submission: the last command of the one
        // before may still be outstanding (its fence is written before
        // `CE_HEAD` moves past it).
        for part in cmds.chunks(RING - 2) {
            let r = self
                .submit(ring, part)
                .map_err(|_| Failure::Gone)
                .and_then(|last| self.wait(ring, last));
            if let Err(failure) = r {
                self.stats.failed.add(1, Relaxed);
                self.report(&failure);
                return Err(self.recover(ring, &failure));
            }
            self.stats.runs.add(1, Relaxed);
            self.stats.commands.add(part.len() as u64, Relaxed);
            for c in part {
                let n = match (c.op, c.flags & (ce::SRC_VRAM | ce::DST_VRAM)) {
                    (ce::FILL, _) => &self.stats.bytes_zeroed,
                    (_, ce::SRC_VRAM) => &self.stats.bytes_out,
                    (_, ce::DST_VRAM) => &self.stats.bytes_in,
                    (_, f) if f == ce::SRC_VRAM | ce::DST_VRAM => &self.stats.bytes_within,
                    // System RAM to system RAM: never submitted.
                    _ => &self.stats.bytes_in,
                };
                n.add(c.len, Relaxed);
            }
        }
        Ok(())
    }

    /// Writes `part` into the (empty) ring and rings the doorbell; the
    /// last command interrupts. Returns its seqno.
    fn submit(&self, ring: &mut Ring, part: &[Command]) -> Result<u64> {
        let buf = ring.buf.as_ref().ok_or(ENODEV)?;
        for (k, c) in part.iter().enumerate() {
            let entry = (ring.tail + k) % RING;
            let last = k + 1 == part.len();
            let flags = c.flags | if last { ce::INTERRUPT } else { 0 };
            let words = [
                u64::from(c.op) | (u64::from(flags) << 32),
                ring.seqno + k as u64 + 1,
                c.src,
                c.dst,
                c.len,
            ];
            let at = entry * ce::COMMAND / 8;
            for w in 0..ce::COMMAND / 8 {
                let v = words.get(w).copied().unwrap_or(0);
                io_write!(buf, [try: at + w], v);
            }
        }
        ring.tail = (ring.tail + part.len()) % RING;
        ring.seqno += part.len() as u64;
        let io = self.bar.try_access().ok_or(ENODEV)?;
        // The entries (coherent memory) are written before the doorbell:
        // an MMIO write is ordered after them.
        io.write_reg(CE_TAIL::zeroed().with_value(ring.tail as u32));
        Ok(ring.seqno)
    }

    /// The fence's value (0 without a buffer).
    fn fence(&self, ring: &Ring) -> u64 {
        let read = |b: &Coherent<[u64]>| -> Result<u64> { Ok(io_read!(b, [try: FENCE])) };
        ring.buf.as_ref().and_then(|b| read(b).ok()).unwrap_or(0)
    }

    /// Waits until the fence reaches `seqno`, sleeping until the interrupt
    /// wakes it; a task with a signal pending cannot sleep and polls (the
    /// engine must finish with the pages before they go).
    fn wait(&self, ring: &Ring, seqno: u64) -> Result<(), Failure> {
        let start = Instant::<Monotonic>::now();
        loop {
            if self.fence(ring) >= seqno {
                // The bytes the commands wrote are read after the fence
                // that says they are there.
                dma_mb(Read);
                return Ok(());
            }
            {
                let io = self.bar.try_access().ok_or(Failure::Gone)?;
                let status = io.read(CE_STATUS);
                if status.into_raw() == u32::MAX {
                    return Err(Failure::Gone);
                }
                if status.halted() {
                    let code = u32::from(io.read(CE_ERROR).code());
                    let seqno = (u64::from(io.read(CE_ERROR_SEQNO_HI).value()) << 32)
                        | u64::from(io.read(CE_ERROR_SEQNO_LO).value());
                    return Err(Failure::Halted { code, seqno });
                }
            }
            if start.elapsed() > Delta::from_millis(WAIT_MS) {
                return Err(Failure::Timeout {
                    fence: self.fence(ring),
                });
            }
            let mut guard = self.wake.lock();
            if self.fence(ring) >= seqno {
                continue;
            }
            match self
                .done
                .wait_interruptible_timeout(&mut guard, msecs_to_jiffies(100))
            {
                CondVarTimeoutResult::Woken { .. } => {
                    self.stats.woken.add(1, Relaxed);
                }
                CondVarTimeoutResult::Signal { .. } => {
                    drop(guard);
                    fsleep(Delta::from_micros(50));
                }
                CondVarTimeoutResult::Timeout => {}
            }
        }
    }

    /// Logs `failure`: the first ten, then one in a thousand (each costs
    /// a reset, but a broken device could fail every submission).
    fn report(&self, failure: &Failure) {
        let n = self.stats.failed.load(Relaxed);
        if n > 10 && n % 1000 != 0 {
            return;
        }
        match failure {
            Failure::Halted { code, seqno } => dev_err!(
                self.dev,
                "msvm-gpu: copy engine halted at seqno {seqno}, error {code}: resetting it\n"
            ),
            Failure::Timeout { fence } => dev_err!(
                self.dev,
                "msvm-gpu: copy engine: no fence after {WAIT_MS} ms (fence {fence}): resetting it\n"
            ),
            Failure::Gone => dev_err!(
                self.dev,
                "msvm-gpu: copy engine: the device does not answer\n"
            ),
        }
    }

    /// Resets the engine after a failed submission and waits until it has
    /// stopped. A device whose registers read all ones is gone from the
    /// bus (surprise removal): it DMAs no more, and is not used again. An
    /// engine that does not stop is lost: its buffer is kept, nothing is
    /// submitted again, and the caller keeps what the run named.
    fn recover(&self, ring: &mut Ring, failure: &Failure) -> RunError {
        let stopped = match failure {
            Failure::Gone => Err(ENODEV),
            _ => self.stop(ring),
        };
        match stopped {
            Ok(()) => return RunError::Failed,
            Err(e) if e == ENODEV => {
                dev_err!(
                    self.dev,
                    "msvm-gpu: copy engine: the device does not answer: not used again\n"
                );
                self.lost.store(true, Relaxed);
                return RunError::Failed;
            }
            Err(_) => {}
        }
        dev_err!(
            self.dev,
            "msvm-gpu: copy engine lost (still busy {STOP_MS} ms after its reset): not used again, its memory kept\n"
        );
        self.lost.store(true, Relaxed);
        core::mem::forget(ring.buf.take());
        RunError::Lost
    }

    /// Resets the engine and waits until it is idle (`ENODEV` if the device
    /// reads all ones or is unbound, `ETIMEDOUT` if it does not stop); then
    /// names the ring and the fence again (a device reset clears them).
    fn stop(&self, ring: &mut Ring) -> Result {
        self.bar
            .try_access()
            .ok_or(ENODEV)?
            .write_reg(CE_CTRL::zeroed().with_reset(true));
        ring.tail = 0;
        // The registers are reached anew at each poll: no RCU read-side
        // section lasts across a sleep.
        wait_idle(|| Some(self.bar.try_access()?.read(CE_STATUS).into_raw()))?;
        if let (Some(io), Some(buf)) = (self.bar.try_access(), ring.buf.as_ref()) {
            program(&io, buf);
        }
        Ok(())
    }

    /// Stops the engine for good, before its device goes: reset, ring and
    /// fence unset, idle, its causes disabled; then the buffer is freed
    /// (kept if the engine did not stop). Waits for a run under way.
    pub(crate) fn shut_down(&self) {
        let mut ring = self.ring.lock();
        self.lost.store(true, Relaxed);
        if ring.buf.is_none() {
            return;
        }
        let stopped = self.stop(&mut ring);
        if let Some(io) = self.bar.try_access() {
            io.write_reg(IRQ_ENABLE::zeroed());
            io.write_reg(CE_RING_SIZE::zeroed());
            io.write_reg(CE_RING_LO::zeroed());
            io.write_reg(CE_RING_HI::zeroed());
            io.write_reg(CE_FENCE_LO::zeroed());
            io.write_reg(CE_FENCE_HI::zeroed());
        }
        if stopped.is_err() {
            dev_err!(
                self.dev,
                "msvm-gpu: copy engine did not stop at shutdown: its buffer is kept\n"
            );
            core::mem::forget(ring.buf.take());
        } else {
            drop(ring.buf.take());
        }
    }

    /// Commands completed since the engine's last reset (`CE_DONE`).
    pub(crate) fn done(&self) -> Option<u64> {
        let io = self.bar.try_access()?;
        Some(
            (u64::from(io.read(CE_DONE_HI).value()) << 32) | u64::from(io.read(CE_DONE_LO).value()),
        )
    }

    /// The probe's self-test (`selftest.rs`).
    pub(crate) fn selftest(&self, pdev: &pci::Device<Bound>) -> Result {
        selftest::round_trip(self, pdev)
    }
}

/// Names `buf` to the engine behind `io` as its ring and fence.
fn program(io: &pci::Bar<'_, { regs::END }>, buf: &Coherent<[u64]>) {
    let base = buf.dma_address();
    let fence = base + (FENCE * 8) as u64;
    io.write_reg(CE_RING_LO::zeroed().with_value(base as u32));
    io.write_reg(CE_RING_HI::zeroed().with_value((base >> 32) as u32));
    io.write_reg(CE_RING_SIZE::zeroed().with_value(RING as u32));
    io.write_reg(CE_FENCE_LO::zeroed().with_value(fence as u32));
    io.write_reg(CE_FENCE_HI::zeroed().with_value((fence >> 32) as u32));
}

/// Waits until `status` (`CE_STATUS`; `None`: the device is unbound) says
/// idle and not halted, after a reset: `ENODEV` if it reads all ones or
/// `None`, `ETIMEDOUT` after [`STOP_MS`].
fn wait_idle(status: impl Fn() -> Option<u32>) -> Result {
    let start = Instant::<Monotonic>::now();
    loop {
        let raw = status().ok_or(ENODEV)?;
        if raw == u32::MAX {
            return Err(ENODEV);
        }
        let s = CE_STATUS::from_raw(raw);
        if s.idle() && !s.halted() {
            return Ok(());
        }
        if start.elapsed() > Delta::from_millis(STOP_MS) {
            return Err(ETIMEDOUT);
        }
        fsleep(Delta::from_millis(1));
    }
}

/// Shuts its engine down when the device is unbound (a devres action of
/// [`CopyEngine::new`]): whoever holds the engine, no session outlasts the
/// binding.
struct Stopper(Arc<CopyEngine>);

impl Drop for Stopper {
    fn drop(&mut self) {
        self.0.shut_down();
    }
}

/// The engine, taken by one submitter ([`CopyEngine::session`]).
///
/// # Invariants
///
/// `ring` is `ce`'s ring lock, taken while `ce` was not shut down: its
/// device is bound until the session ends ([`CopyEngine::shut_down`], which
/// takes the lock, runs before the device is unbound: [`Stopper`], a devres
/// action of the device's binding, runs it at the latest).
pub(crate) struct Session<'e> {
    ce: &'e CopyEngine,
    ring: MutexGuard<'e, Ring>,
}

impl Session<'_> {
    /// The device, bound for as long as the session lasts (what the
    /// commands' system pages are mapped for), and the engine to run them.
    pub(crate) fn parts(&mut self) -> (&device::Device<Bound>, Runner<'_>) {
        // SAFETY: the device is bound while the session lasts (type
        // invariant), which the borrow cannot outlive. (The device's
        // devres actions registered after the engine's `Stopper` may be
        // released already: the device is for DMA mappings, not for
        // `Devres::access`.)
        let dev = unsafe { self.ce.dev.as_bound() };
        let runner = Runner {
            ce: self.ce,
            ring: &mut self.ring,
        };
        (dev, runner)
    }
}

/// The engine of a [`Session`], to run commands with.
pub(crate) struct Runner<'s> {
    ce: &'s CopyEngine,
    ring: &'s mut Ring,
}

impl Runner<'_> {
    /// Runs `cmds` in ring order and returns when the last one has
    /// completed: every byte they name is written. On an error or a
    /// timeout the engine is reset and idle before this returns
    /// [`RunError::Failed`]: no command of `cmds` touches memory
    /// afterwards. [`RunError::Lost`]: the engine may still, so what the
    /// commands name must be kept for good (the engine lost before this
    /// run: nothing was submitted, and nothing needs keeping).
    ///
    /// # Safety
    ///
    /// The engine writes where `cmds` say, with nothing between it and
    /// memory but the DMA API's mappings: every DMA address in `cmds` is a
    /// live mapping for the session's device of memory the caller may have
    /// the device read (a source) or write (a destination), `len` bytes
    /// from it; every VRAM range is the caller's to read or write. All of it
    /// stays so until this returns, and for good if it returns
    /// [`RunError::Lost`].
    pub(crate) unsafe fn run(&mut self, cmds: &[Command]) -> Result<(), RunError> {
        if !self.ce.usable() {
            return Err(RunError::Failed);
        }
        self.ce.run(self.ring, cmds)
    }
}
