// SPDX-License-Identifier: GPL-2.0

//! An engine's sessions: [`Session`], the engine taken by one submitter;
//! [`Parked`], a session whose job stalls on a fault while its submitter
//! services it; [`Runner`], what a session runs commands with.

use kernel::{
    device::{self, Bound},
    io::{io_read, io_write},
    prelude::*,
    sync::{atomic::Relaxed, MutexGuard},
};

use super::{Engine, Failure, Queue, Ring, RunError, Waited, FENCE};

/// The engine, taken by one submitter ([`Queue::session`]).
///
/// # Invariants
///
/// `ring` is `q`'s ring lock, taken while `q` was not shut down: its
/// device is bound until the session ends ([`Queue::shut_down`], which
/// takes the lock, runs before the device is unbound: [`Stopper`], a devres
/// action of the device's binding, runs it at the latest).
pub(crate) struct Session<'e, E: Engine> {
    pub(super) q: &'e Queue<E>,
    pub(super) ring: MutexGuard<'e, Ring>,
}

impl<E: Engine> Session<'_, E> {
    /// The device, bound for as long as the session lasts (what the
    /// commands' system pages are mapped for), and the engine to run them.
    pub(crate) fn parts(&mut self) -> (&device::Device<Bound>, Runner<'_, E>) {
        // SAFETY: the device is bound while the session lasts (type
        // invariant), which the borrow cannot outlive. (The device's
        // devres actions registered after the engine's `Stopper` may be
        // released already: the device is for DMA mappings, not for
        // `Devres::access`.)
        let dev = unsafe { self.q.dev.as_bound() };
        let runner = Runner {
            q: self.q,
            ring: &mut self.ring,
        };
        (dev, runner)
    }

    /// Whether another submitter waits for the engine: a session kept
    /// across many commands (a pipeline) ends soon when it does.
    pub(crate) fn contended(&self) -> bool {
        self.q.waiting.load(Relaxed) > 0
    }
}

impl<'e, E: Engine> Session<'e, E> {
    /// Frees the engine's lock while its run stalls on a fault, which its
    /// submitter services: no other session begins until it resumes.
    pub(crate) fn park(mut self) -> Parked<'e, E> {
        self.ring.parked = true;
        Parked {
            q: self.q,
            resumed: false,
        }
    }
}

/// A [`Session`] whose run stalls, parked ([`Session::park`]). Dropped
/// without [`Parked::resume`], it resets the engine: the stalled job ends
/// there.
pub(crate) struct Parked<'e, E: Engine> {
    q: &'e Queue<E>,
    resumed: bool,
}

impl<'e, E: Engine> Parked<'e, E> {
    /// The session again, its run still stalled: [`RunError`] if the
    /// engine was shut down or lost meanwhile (the stalled job ended with
    /// the reset, or, [`RunError::Lost`], may still run).
    pub(crate) fn resume(mut self) -> Result<Session<'e, E>, RunError> {
        self.resumed = true;
        let mut ring = self.q.ring.lock();
        ring.parked = false;
        if !self.q.usable() {
            ring.inflight = None;
            return Err(if ring.abandoned {
                RunError::Lost
            } else {
                RunError::Failed { code: 0, addr: 0 }
            });
        }
        // INVARIANT: `ring` is held and the engine not shut down.
        Ok(Session { q: self.q, ring })
    }
}

impl<E: Engine> Drop for Parked<'_, E> {
    fn drop(&mut self) {
        if self.resumed {
            return;
        }
        let mut ring = self.q.ring.lock();
        ring.parked = false;
        if ring.inflight.take().is_some() && self.q.usable() {
            self.q.queue.failed.add(1, Relaxed);
            self.q.report(&Failure::Abandoned);
            self.q.recover(&mut ring, &Failure::Abandoned);
        }
    }
}

/// The engine of a [`Session`], to run commands with.
pub(crate) struct Runner<'s, E: Engine> {
    q: &'s Queue<E>,
    ring: &'s mut Ring,
}

impl<E: Engine> Runner<'_, E> {
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
    /// memory but the DMA API's mappings (and, for jobs, the page tables in
    /// VRAM): every DMA address in `cmds`, and in the entries of the page
    /// tables they use, is a live mapping for the session's device of
    /// memory the caller may have the device read (a source) or write (a
    /// destination), `len` bytes from it; every VRAM range is the caller's
    /// to read or write. All of it stays so until this returns, and for
    /// good if it returns [`RunError::Lost`].
    pub(crate) unsafe fn run(&mut self, cmds: &[E::Command]) -> Result<(), RunError> {
        if !self.q.usable() {
            return Err(RunError::Failed { code: 0, addr: 0 });
        }
        self.q.run(self.ring, cmds)
    }

    /// Runs `cmd` and returns when it has completed, as [`Runner::run`],
    /// or when it stalls on a fault (`stalls` reads the device's word on
    /// it): [`Waited::Stalled`], to be answered ([`super::faults`]) and
    /// waited for again ([`Runner::wait_again`]), or parked meanwhile.
    ///
    /// # Safety
    ///
    /// As [`Runner::run`], until it completes: while it stalls, the caller
    /// may change what it named only by making its next access fault (its
    /// entries zapped, the TLB invalidated before it is answered).
    pub(crate) unsafe fn start(
        &mut self,
        cmd: &E::Command,
        stalls: &dyn Fn() -> bool,
    ) -> Result<Waited, RunError> {
        if !self.q.usable() {
            return Err(RunError::Failed { code: 0, addr: 0 });
        }
        let r = self.q.run_stalling(self.ring, Some(cmd), stalls);
        if r == Ok(Waited::Done) {
            E::count(&self.q.stats, core::slice::from_ref(cmd));
        }
        r
    }

    /// Gives up the command [`Runner::start`] left stalled (or the ones
    /// [`Runner::queue`] queued): the engine is reset and touches nothing
    /// they named afterwards, unless it is lost ([`RunError::Lost`]: as
    /// [`Runner::run`]'s).
    pub(crate) fn abandon(&mut self) -> RunError {
        self.q.fail(self.ring, &Failure::Abandoned)
    }

    /// The seqno of the command [`Runner::start`] left stalled (or of the
    /// last one [`Runner::queue`] queued, until it completes).
    pub(crate) fn inflight(&self) -> Option<u64> {
        self.ring.inflight
    }

    /// Waits for the command [`Runner::start`] left stalled, once answered.
    pub(crate) fn wait_again(
        &mut self,
        cmd: &E::Command,
        stalls: &dyn Fn() -> bool,
    ) -> Result<Waited, RunError> {
        let r = self.q.run_stalling(self.ring, None, stalls);
        if r == Ok(Waited::Done) {
            E::count(&self.q.stats, core::slice::from_ref(cmd));
        }
        r
    }

    /// Queues `cmd` behind the commands outstanding and returns its seqno
    /// without waiting: a pipeline, in which the engine runs one command
    /// while its submitter prepares the next. Wait for it with
    /// [`Runner::wait_queued`], oldest first. [`RunError`] as
    /// [`Runner::run`]'s (with the ring full, which a submitter that waits
    /// for its older commands never meets, the engine is reset).
    ///
    /// # Safety
    ///
    /// As [`Runner::run`], until [`Runner::wait_queued`] says it (or a
    /// command queued after it) completed, or any run of the session
    /// failed ([`RunError::Failed`]: the engine was reset, which ends
    /// every command queued), or for good on [`RunError::Lost`]. Until
    /// then the session runs nothing else ([`Runner::run`],
    /// [`Runner::start`]), is not parked, and is not dropped: the engine
    /// may still read the ring. A stall ([`Waited::Stalled`]) is answered
    /// or given up ([`Runner::abandon`]) as [`Runner::start`]'s is.
    pub(crate) unsafe fn queue(&mut self, cmd: &E::Command) -> Result<u64, RunError> {
        if !self.q.usable() {
            return Err(RunError::Failed { code: 0, addr: 0 });
        }
        self.q.queue_one(self.ring, cmd)
    }

    /// Waits until the command [`Runner::queue`] gave `seqno` completes
    /// (and every one before it), or the engine stalls on a fault
    /// (`stalls`: [`Waited::Stalled`], to be answered or given up with
    /// [`Runner::abandon`]). On [`RunError::Failed`] the engine was reset:
    /// no command queued touches memory afterwards.
    pub(crate) fn wait_queued(
        &mut self,
        (seqno, cmd): (u64, &E::Command),
        stalls: &dyn Fn() -> bool,
    ) -> Result<Waited, RunError> {
        let r = self.q.wait_queued(self.ring, seqno, stalls);
        if r == Ok(Waited::Done) {
            E::count(&self.q.stats, core::slice::from_ref(cmd));
        }
        r
    }

    /// The DMA address of scratch word `i` (what a command may point the
    /// engine at: [`Engine::SCRATCH`]).
    pub(crate) fn scratch_addr(&self, i: usize) -> Option<u64> {
        self.ring.scratch_addr::<E>(i)
    }

    /// Writes scratch word `i`.
    pub(crate) fn set_scratch(&mut self, i: usize, v: u64) -> Result {
        let buf = self.ring.buf.as_ref().ok_or(ENODEV)?;
        if i >= E::SCRATCH {
            return Err(EINVAL);
        }
        io_write!(buf, [try: FENCE + 1 + i], v);
        Ok(())
    }

    /// Reads scratch word `i` (after a run that wrote it: the fence was
    /// read first).
    pub(crate) fn scratch(&self, i: usize) -> Result<u64> {
        let buf = self.ring.buf.as_ref().ok_or(ENODEV)?;
        if i >= E::SCRATCH {
            return Err(EINVAL);
        }
        Ok(io_read!(buf, [try: FENCE + 1 + i]))
    }
}
