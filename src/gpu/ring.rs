// SPDX-License-Identifier: GPL-2.0

//! An msvm-gpu engine's ring (Documentation/hardware.rst, "Rings"), as
//! msvm owns it while the device is bound: commands written into it, the
//! doorbell, the fence waited for by interrupt, reset and recovery. The
//! copy engine (`super::copy`) and the job engine (`super::job`) are each
//! a [`Queue`] of their [`Engine`].
//!
//! # Lock order
//!
//! [`Queue::ring`] (a mutex: one submitter at a time; the copy engine's
//! from a migration step under an mmap lock, a shrink pass or a teardown;
//! the job engine's from a job under its VM's mirror lock) ->
//! [`Queue::wake`] (a spinlock with interrupts off, which the interrupt
//! handler takes alone to wake the waiter). Nothing is allocated under
//! `ring`: a shrinker's page moves take the copy engine's.
//!
//! A job that stalls on a fault is serviced with the engine parked
//! ([`Session::park`]): `ring` and the VM's mirror lock are free, and no
//! new session begins until the parked one resumes, which it does under
//! its mirror lock and then `ring`, in that order: [`Queue::session`]
//! fails with `EBUSY` meanwhile (its caller holds its own VM's mirror
//! lock, which reclaim may wait for while the fault service allocates:
//! it must not wait), and the caller's window runs on the CPU.

use core::marker::PhantomData;

use kernel::{
    device::{self, Bound},
    devres,
    dma::Coherent,
    io::{io_read, io_write, register::RegisterBase, register::WithBase, Io},
    new_condvar, new_mutex, new_spinlock_irq, pci,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Acquire, Atomic, Relaxed, Release},
        barrier::{dma_mb, Read},
        Arc, CondVar, CondVarTimeoutResult, Mutex, SpinLockIrq,
    },
    time::{
        delay::{fsleep, udelay},
        msecs_to_jiffies, Delta, Instant, Monotonic,
    },
};

use super::regs::{
    self, RingBase, RING_CTRL, RING_DONE_HI, RING_DONE_LO, RING_ERROR, RING_ERROR_ADDR_HI,
    RING_ERROR_ADDR_LO, RING_ERROR_SEQNO_HI, RING_ERROR_SEQNO_LO, RING_STATUS, RING_TAIL,
};

/// BAR0, shared by a device's engines and its MMU.
pub(crate) type Regs = pci::DevresBar<{ regs::END }>;

/// Entries of a ring; one submission puts at most `RING - 1` commands in
/// it (a full ring would look empty: `HEAD == TAIL`).
pub(crate) const RING: usize = 1024;
/// Bytes of a command.
pub(crate) const COMMAND: usize = 64;
/// Words of a command.
pub(crate) const COMMAND_WORDS: usize = COMMAND / 8;
/// The fence's word in the buffer, after the ring.
const FENCE: usize = RING * COMMAND_WORDS;
/// How long a submission may take before the engine is reset: longer than
/// the device waits for QEMU to serve one transfer (10 s); a ring of
/// copies, or a job's window, runs in well under a second even under TCG.
const WAIT_MS: i64 = 15_000;
/// How long a reset engine may take to stop (see [`WAIT_MS`]).
const STOP_MS: i64 = 12_000;
/// How long a submission polls its fence before it sleeps until the
/// interrupt: about the device's round trip for the smallest command (a
/// doorbell, a page, the fence), less than the interrupt's (its handler
/// reads and writes `IRQ_STATUS`, then wakes the waiter).
const SPIN_US: i64 = 100;
/// How long a waiter goes without reading its engine's status (see
/// [`Queue::wait`]); its sleeps last this long at most too.
const LOOK_MS: u32 = 100;

/// One kind of engine: where its registers are, what its commands are,
/// what it counts.
pub(crate) trait Engine: RegisterBase<RingBase> + Send + Sync + 'static {
    /// Its name, in log lines.
    const NAME: &'static str;
    /// Words of its buffer after the ring and the fence (room for what its
    /// commands point at).
    const SCRATCH: usize;
    /// A command, as the driver builds it.
    type Command;
    /// Its counters.
    type Stats: Send + Sync;

    /// New counters.
    fn stats() -> Self::Stats;

    /// The command's words in the ring, with its `seqno`; `last`: the
    /// submission's last command, which interrupts.
    fn encode(c: &Self::Command, seqno: u64, last: bool) -> [u64; COMMAND_WORDS];

    /// Counts `cmds`, completed.
    fn count(stats: &Self::Stats, cmds: &[Self::Command]);

    /// Fault injection: a command that never completes, to be queued
    /// before the next one, if one is due (`scratch`: the DMA address of
    /// a scratch word).
    fn hang(_scratch: &dyn Fn(usize) -> Option<u64>) -> Option<Self::Command> {
        None
    }
}

/// The ring's state, under [`Queue::ring`].
struct Ring {
    /// The ring, the fence and the scratch words; `None` once given up to
    /// an engine that never stopped (leaked: no later owner of its pages
    /// sees the device write).
    buf: Option<Coherent<[u64]>>,
    /// The entry after the last one written (`TAIL`).
    tail: usize,
    /// The last seqno given.
    seqno: u64,
    /// A run stalls on a fault while its submitter services it, the lock
    /// free ([`session::Parked`]): no other session begins.
    parked: bool,
    /// The command of a run that stalled, or the last one queued
    /// ([`Runner::queue`]), until it completes.
    inflight: Option<u64>,
    /// The engine was given up while it might still run (it did not stop
    /// after a reset): what a parked run named must be kept for good.
    abandoned: bool,
}

impl Ring {
    /// The DMA address of scratch word `i` of `E`'s buffer.
    fn scratch_addr<E: Engine>(&self, i: usize) -> Option<u64> {
        let buf = self.buf.as_ref()?;
        (i < E::SCRATCH).then(|| buf.dma_address() + ((FENCE + 1 + i) * 8) as u64)
    }
}

/// A queue's counters, whatever its engine.
pub(crate) struct QueueStats {
    /// Submissions run to their fence.
    pub(crate) runs: Atomic<u64>,
    /// Commands completed.
    pub(crate) commands: Atomic<u64>,
    /// Waits that slept until the interrupt woke them.
    pub(crate) woken: Atomic<u64>,
    /// Submissions that failed (an error, a timeout), each followed by a
    /// reset.
    pub(crate) failed: Atomic<u64>,
    /// Of those, the ones the device's watchdog stopped.
    pub(crate) watchdog: Atomic<u64>,
}

/// An engine of an msvm-gpu, for as long as its device is bound: a ring of
/// [`RING`] entries and a fence in memory from the DMA API, waited for by
/// the COMPLETION interrupt (`super::irq`).
///
/// # Invariants
///
/// While [`Ring::buf`] is `Some`, the engine's `RING*` and `FENCE*`
/// registers name it, and whenever `ring` is not held the engine has no
/// command left to read.
#[pin_data]
pub(crate) struct Queue<E: Engine> {
    bar: Arc<Regs>,
    dev: ARef<device::Device>,
    #[pin]
    ring: Mutex<Ring>,
    #[pin]
    wake: SpinLockIrq<()>,
    /// Bumped by every wake: a waiter that saw it change since it looked
    /// at the engine looks again rather than sleeping.
    woken: Atomic<u64>,
    /// ERROR interrupts handled, and their number when a waiter last read
    /// the engine's status: a waiter reads it (a register, a round trip to
    /// the device) only when an ERROR came since, or when it has slept
    /// without a wake (a device gone raises nothing).
    errors: Atomic<u64>,
    checked: Atomic<u64>,
    /// Submitters waiting for `ring` ([`Session::contended`]).
    waiting: Atomic<u32>,
    #[pin]
    done: CondVar,
    /// The engine did not stop after a reset, or the device is going: no
    /// submission runs.
    lost: Atomic<bool>,
    pub(crate) queue: QueueStats,
    pub(crate) stats: E::Stats,
    _engine: PhantomData<E>,
}

/// Why a run did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunError {
    /// The engine failed (an error, a timeout) and was reset: it is idle
    /// and touches nothing it was given again. `code` is the device's
    /// error (hardware.rst's codes; 0 for a timeout or a device gone) and
    /// `addr` the address it concerns.
    Failed { code: u32, addr: u64 },
    /// The engine did not stop, or the device does not answer: it may
    /// still read or write anything it was given, which must be kept (never
    /// freed, never unmapped) for good. The engine is not used again.
    Lost,
}

/// How a wait that stops at a stall ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waited {
    /// The command completed.
    Done,
    /// It stalls on a fault, until answered.
    Stalled,
}

impl<E: Engine> Queue<E> {
    /// Sets up the engine of the device behind `bar`: a reset (an error if
    /// the engine does not stop: a binding before may have left it
    /// running), then its ring and fence in a new buffer. COMPLETION is not
    /// enabled yet (the interrupt handler needs the engine:
    /// [`super::irq::Interrupt`]). The engine is shut down when `pdev` is
    /// unbound, at the latest ([`Stopper`]).
    pub(super) fn new(pdev: &pci::Device<Bound>, bar: Arc<Regs>) -> Result<Arc<Self>> {
        {
            let io = bar.access(pdev.as_ref())?;
            io.write(WithBase::of::<E>(), RING_CTRL::zeroed().with_reset(true));
            wait_idle(|| Some(io.read(RING_STATUS::of::<E>()).into_raw())).inspect_err(|_| {
                dev_err!(
                    pdev.as_ref(),
                    "msvm-gpu: {} still busy {STOP_MS} ms after its reset, or not answering\n",
                    E::NAME
                )
            })?;
        }
        let words = FENCE + 1 + E::SCRATCH;
        let buf: Coherent<[u64]> = Coherent::zeroed_slice(pdev.as_ref(), words, GFP_KERNEL)?;
        program::<E>(bar.access(pdev.as_ref())?, &buf);
        // INVARIANT: the registers name `buf`, and the reset engine is
        // idle.
        let q = Arc::pin_init(
            try_pin_init!(Self {
                bar,
                dev: ARef::from(pdev.as_ref()),
                ring <- new_mutex!(
                    Ring {
                        buf: Some(buf),
                        tail: 0,
                        seqno: 0,
                        parked: false,
                        inflight: None,
                        abandoned: false,
                    },
                    "Queue::ring"
                ),
                wake <- new_spinlock_irq!((), "Queue::wake"),
                done <- new_condvar!("Queue::done"),
                woken: Atomic::new(0),
                errors: Atomic::new(0),
                checked: Atomic::new(0),
                waiting: Atomic::new(0),
                lost: Atomic::new(false),
                queue: QueueStats {
                    runs: Atomic::new(0),
                    commands: Atomic::new(0),
                    woken: Atomic::new(0),
                    failed: Atomic::new(0),
                    watchdog: Atomic::new(0),
                },
                stats: E::stats(),
                _engine: PhantomData,
            }? Error),
            GFP_KERNEL,
        )?;
        // Registered after `bar`, released before it: the engine stops
        // while its registers are still mapped.
        devres::register(pdev.as_ref(), Stopper(q.clone()), GFP_KERNEL)
            .inspect_err(|_| q.shut_down())?;
        Ok(q)
    }

    /// The registers, while the device is bound.
    pub(super) fn bar(&self) -> &Arc<Regs> {
        &self.bar
    }

    /// Wakes a submission waiting for its fence (the interrupt handler,
    /// on COMPLETION or ERROR).
    pub(super) fn wake(&self) {
        let _guard = self.wake.lock();
        self.woken.add(1, Relaxed);
        self.done.notify_all();
    }

    /// An ERROR interrupt came (the handler): the next wait reads the
    /// engine's status.
    pub(super) fn note_error(&self) {
        self.errors.fetch_add(1, Release);
    }

    /// Whether submissions run (the engine answered its last reset).
    pub(crate) fn usable(&self) -> bool {
        !self.lost.load(Relaxed)
    }

    /// Takes the engine for a run of submissions ([`Runner::run`]):
    /// `ENODEV` once it is lost or shut down. Nothing may be allocated
    /// while the session lasts (see the lock order).
    pub(crate) fn session(&self) -> Result<Session<'_, E>> {
        self.waiting.add(1, Relaxed);
        let ring = self.ring.lock();
        self.waiting.fetch_sub(1, Relaxed);
        if ring.parked {
            return Err(EBUSY);
        }
        if !self.usable() {
            return Err(ENODEV);
        }
        // INVARIANT: `ring` is held and the engine not shut down.
        Ok(Session { q: self, ring })
    }

    /// Runs `cmds` in ring order and returns when the last one has
    /// completed; see [`Runner::run`].
    fn run(&self, ring: &mut Ring, cmds: &[E::Command]) -> Result<(), RunError> {
        // A command in flight (stalled, or queued and not waited for):
        // whatever is in flight ends with the reset.
        if ring.inflight.is_some() {
            return Err(self.fail(ring, &Failure::Abandoned));
        }
        // At most `RING - 2` a submission: the last command of the one
        // before may still be outstanding (its fence is written before
        // `HEAD` moves past it).
        for part in cmds.chunks(RING - 2) {
            let r = self
                .submit(ring, part)
                .map_err(|_| Failure::Gone)
                .and_then(|last| self.wait(ring, last, &|| false));
            if let Err(failure) = r {
                return Err(self.fail(ring, &failure));
            }
            self.queue.runs.add(1, Relaxed);
            self.queue.commands.add(part.len() as u64, Relaxed);
            E::count(&self.stats, part);
        }
        Ok(())
    }

    /// Writes `part` into the ring after the commands outstanding (at
    /// most `RING - 1` in all) and rings the doorbell; the last command
    /// interrupts. Returns its seqno.
    fn submit(&self, ring: &mut Ring, part: &[E::Command]) -> Result<u64> {
        let buf = ring.buf.as_ref().ok_or(ENODEV)?;
        for (k, c) in part.iter().enumerate() {
            let entry = (ring.tail + k) % RING;
            let words = E::encode(c, ring.seqno + k as u64 + 1, k + 1 == part.len());
            let at = entry * COMMAND_WORDS;
            for (w, &v) in words.iter().enumerate() {
                io_write!(buf, [try: at + w], v);
            }
        }
        ring.tail = (ring.tail + part.len()) % RING;
        ring.seqno += part.len() as u64;
        let io = self.bar.try_access().ok_or(ENODEV)?;
        // The entries (coherent memory) are written before the doorbell:
        // an MMIO write is ordered after them.
        io.write(
            WithBase::of::<E>(),
            RING_TAIL::zeroed().with_value(ring.tail as u32),
        );
        Ok(ring.seqno)
    }

    /// The fence's value (0 without a buffer).
    fn fence(&self, ring: &Ring) -> u64 {
        let read = |b: &Coherent<[u64]>| -> Result<u64> { Ok(io_read!(b, [try: FENCE])) };
        ring.buf.as_ref().and_then(|b| read(b).ok()).unwrap_or(0)
    }

    /// Runs `cmd` (`None`: the run that stalled, resumed) until it
    /// completes or stalls, as `stalls` says; see [`Runner::start`].
    fn run_stalling(
        &self,
        ring: &mut Ring,
        cmd: Option<&E::Command>,
        stalls: &dyn Fn() -> bool,
    ) -> Result<Waited, RunError> {
        let seqno = match (cmd, ring.inflight) {
            (Some(c), None) => self.submit_one(ring, c).map_err(|_| Failure::Gone),
            (None, Some(seqno)) => Ok(seqno),
            // A command in flight and another run, or nothing to resume:
            // whatever is in flight ends with the reset.
            _ => Err(Failure::Abandoned),
        };
        let seqno = match seqno {
            Ok(seqno) => seqno,
            Err(failure) => return Err(self.fail(ring, &failure)),
        };
        ring.inflight = Some(seqno);
        let r = self.wait(ring, seqno, stalls);
        self.settle(ring, seqno, r)
    }

    /// Queues `cmd` behind the commands outstanding (after an injected
    /// hang, if one is due) and rings the doorbell: its seqno, to wait
    /// for ([`Queue::wait_queued`]). See [`Runner::queue`].
    fn queue_one(&self, ring: &mut Ring, cmd: &E::Command) -> Result<u64, RunError> {
        // Room for this, a hang before it, and the last command of the
        // submission before (see `run`).
        let outstanding = ring.seqno.saturating_sub(self.fence(ring));
        let r = if outstanding + 3 > RING as u64 {
            Err(Failure::Overrun)
        } else {
            self.submit_one(ring, cmd).map_err(|_| Failure::Gone)
        };
        match r {
            Ok(seqno) => {
                ring.inflight = Some(seqno);
                Ok(seqno)
            }
            Err(failure) => Err(self.fail(ring, &failure)),
        }
    }

    /// Waits until the queued command `seqno` completes, or the engine
    /// stalls on a fault (`stalls`); an error or a timeout resets the
    /// engine, which ends every command queued.
    fn wait_queued(
        &self,
        ring: &mut Ring,
        seqno: u64,
        stalls: &dyn Fn() -> bool,
    ) -> Result<Waited, RunError> {
        let r = self.wait(ring, seqno, stalls);
        self.settle(ring, seqno, r)
    }

    /// Writes `cmd` into the ring, after an injected hang if one is due
    /// ([`Engine::hang`]), and rings the doorbell: its seqno.
    fn submit_one(&self, ring: &mut Ring, cmd: &E::Command) -> Result<u64> {
        match E::hang(&|i| ring.scratch_addr::<E>(i)) {
            Some(h) => self.submit(ring, core::slice::from_ref(&h)),
            None => Ok(0),
        }
        .and_then(|_| self.submit(ring, core::slice::from_ref(cmd)))
    }

    /// How the wait for command `seqno` ended, counted: a failure reported
    /// and the engine recovered.
    fn settle(
        &self,
        ring: &mut Ring,
        seqno: u64,
        r: Result<Waited, Failure>,
    ) -> Result<Waited, RunError> {
        match r {
            Ok(Waited::Stalled) => Ok(Waited::Stalled),
            Ok(Waited::Done) => {
                if ring.inflight == Some(seqno) {
                    ring.inflight = None;
                }
                self.queue.runs.add(1, Relaxed);
                self.queue.commands.add(1, Relaxed);
                Ok(Waited::Done)
            }
            Err(failure) => Err(self.fail(ring, &failure)),
        }
    }

    /// A run failed (`failure`): counted, reported, and the engine reset
    /// (see [`Queue::recover`]); nothing of it is in flight any more.
    fn fail(&self, ring: &mut Ring, failure: &Failure) -> RunError {
        ring.inflight = None;
        self.queue.failed.add(1, Relaxed);
        self.report(failure);
        self.recover(ring, failure)
    }

    /// Waits until the fence reaches `seqno`, sleeping until the interrupt
    /// wakes it, or until the engine stalls on a fault (`stalls`); a task
    /// with a signal pending cannot sleep and polls (the engine must
    /// finish with the pages before they go).
    fn wait(&self, ring: &Ring, seqno: u64, stalls: &dyn Fn() -> bool) -> Result<Waited, Failure> {
        let start = Instant::<Monotonic>::now();
        // A short command is done before an interrupt could be handled:
        // the fence (memory, not a register) is polled first.
        while start.elapsed() < Delta::from_micros(SPIN_US) {
            if self.fence(ring) >= seqno {
                dma_mb(Read);
                return Ok(Waited::Done);
            }
            udelay(Delta::from_micros(1));
        }
        // The status is read after an ERROR not looked at yet, and at
        // least every `LOOK_MS` (a device gone raises nothing; an ERROR
        // left in `IRQ_STATUS` is not seen until the next interrupt).
        let mut looked = Instant::<Monotonic>::now();
        loop {
            // Read before the engine is looked at: a wake after it (an
            // interrupt) makes the wait below look again.
            let seen = self.woken.load(Acquire);
            let errors = self.errors.load(Acquire);
            if self.fence(ring) >= seqno {
                // The bytes the commands wrote are read after the fence
                // that says they are there.
                dma_mb(Read);
                return Ok(Waited::Done);
            }
            let due = looked.elapsed() > Delta::from_millis(LOOK_MS.into());
            if due || errors != self.checked.load(Relaxed) {
                self.checked.store(errors, Relaxed);
                looked = Instant::<Monotonic>::now();
                let io = self.bar.try_access().ok_or(Failure::Gone)?;
                let status = io.read(RING_STATUS::of::<E>());
                if status.into_raw() == u32::MAX {
                    return Err(Failure::Gone);
                }
                if status.halted() {
                    let word = |lo: u32, hi: u32| (u64::from(hi) << 32) | u64::from(lo);
                    let code = io.read(RING_ERROR::of::<E>()).code();
                    let seqno = word(
                        u32::from(io.read(RING_ERROR_SEQNO_LO::of::<E>()).value()),
                        u32::from(io.read(RING_ERROR_SEQNO_HI::of::<E>()).value()),
                    );
                    let addr = word(
                        u32::from(io.read(RING_ERROR_ADDR_LO::of::<E>()).value()),
                        u32::from(io.read(RING_ERROR_ADDR_HI::of::<E>()).value()),
                    );
                    return Err(Failure::Halted {
                        code: u32::from(code),
                        seqno,
                        addr,
                    });
                }
            }
            if stalls() {
                // The records were written before the stall shows.
                dma_mb(Read);
                return Ok(Waited::Stalled);
            }
            if start.elapsed() > Delta::from_millis(WAIT_MS) {
                return Err(Failure::Timeout {
                    fence: self.fence(ring),
                });
            }
            let mut guard = self.wake.lock();
            let woken = self.woken.load(Relaxed) != seen;
            if woken || self.errors.load(Relaxed) != errors || self.fence(ring) >= seqno {
                continue;
            }
            match self
                .done
                .wait_interruptible_timeout(&mut guard, msecs_to_jiffies(LOOK_MS))
            {
                CondVarTimeoutResult::Woken { .. } => {
                    self.queue.woken.add(1, Relaxed);
                }
                CondVarTimeoutResult::Signal { .. } => {
                    drop(guard);
                    fsleep(Delta::from_micros(50));
                }
                CondVarTimeoutResult::Timeout => {}
            }
        }
    }

    /// Commands completed since the engine's last reset (`DONE`); `None`
    /// once the device is unbound or gone (it reads all ones).
    pub(crate) fn done(&self) -> Option<u64> {
        let io = self.bar.try_access()?;
        let n = (u64::from(io.read(RING_DONE_HI::of::<E>()).value()) << 32)
            | u64::from(io.read(RING_DONE_LO::of::<E>()).value());
        (n != u64::MAX).then_some(n)
    }
}

mod reset;
mod session;

use reset::{program, wait_idle, Failure, Stopper};
pub(crate) use session::{Runner, Session};
