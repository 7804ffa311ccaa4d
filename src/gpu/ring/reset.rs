// SPDX-License-Identifier: GPL-2.0

//! An engine's failures, reset and recovery (`super::Queue`): what a
//! failed submission saw, its log line, the reset that stops the engine
//! and names its ring again, the engine lost when it does not stop or the
//! device does not answer, and the shutdown when the device goes.

use kernel::{
    dma::Coherent,
    io::{register::WithBase, Io},
    pci,
    prelude::*,
    sync::{atomic::Relaxed, Arc},
    time::{delay::fsleep, Delta, Instant, Monotonic},
};

use super::{Engine, Queue, Ring, RunError, FENCE, RING, STOP_MS, WAIT_MS};
use crate::gpu::regs::{
    self, error, IRQ_ENABLE, RING_CTRL, RING_FENCE_HI, RING_FENCE_LO, RING_HI, RING_LO, RING_SIZE,
    RING_STATUS,
};

/// What a failed submission saw.
pub(super) enum Failure {
    /// Halted with `code` at `seqno` for `addr` (hardware.rst's codes).
    Halted { code: u32, seqno: u64, addr: u64 },
    /// No fence after [`WAIT_MS`], at `fence`.
    Timeout { fence: u64 },
    /// The device is not there (unbound, or its BAR reads all ones).
    Gone,
    /// A stalled job given up by its submitter.
    Abandoned,
    /// A command queued with the ring full (a submitter that queues
    /// without waiting: a driver bug, not the device's).
    Overrun,
}

impl<E: Engine> Queue<E> {
    /// Logs `failure`: the first ten, then one in a thousand (each costs
    /// a reset, but a broken device could fail every submission).
    pub(super) fn report(&self, failure: &Failure) {
        let n = self.queue.failed.load(Relaxed);
        if n > 10 && n % 1000 != 0 {
            return;
        }
        let name = E::NAME;
        match failure {
            Failure::Halted {
                code: error::WATCHDOG,
                seqno,
                ..
            } => dev_err!(
                self.dev,
                "msvm-gpu: {name}: the job at seqno {seqno} ran past its watchdog: resetting the engine\n"
            ),
            Failure::Halted { code, seqno, addr } => dev_err!(
                self.dev,
                "msvm-gpu: {name} halted at seqno {seqno}, error {code} (address {addr:#x}): resetting it\n"
            ),
            Failure::Timeout { fence } => dev_err!(
                self.dev,
                "msvm-gpu: {name}: no fence after {WAIT_MS} ms (fence {fence}): resetting it\n"
            ),
            Failure::Gone => dev_err!(self.dev, "msvm-gpu: {name}: the device does not answer\n"),
            Failure::Abandoned => dev_err!(
                self.dev,
                "msvm-gpu: {name}: a stalled job abandoned (an answer not taken, or a stall after a cancel): resetting it\n"
            ),
            Failure::Overrun => dev_err!(
                self.dev,
                "msvm-gpu: {name}: a command queued with the ring full: resetting it\n"
            ),
        }
    }

    /// Resets the engine after a failed submission and waits until it has
    /// stopped. A device whose registers read all ones is gone from the
    /// bus (surprise removal): it DMAs no more, and is not used again. An
    /// engine that does not stop is lost: its buffer is kept, nothing is
    /// submitted again, and the caller keeps what the run named.
    pub(super) fn recover(&self, ring: &mut Ring, failure: &Failure) -> RunError {
        let failed = match *failure {
            Failure::Halted { code, addr, .. } => {
                if code == error::WATCHDOG {
                    self.queue.watchdog.add(1, Relaxed);
                }
                RunError::Failed { code, addr }
            }
            _ => RunError::Failed { code: 0, addr: 0 },
        };
        let stopped = match failure {
            Failure::Gone => Err(ENODEV),
            _ => self.stop(ring),
        };
        match stopped {
            Ok(()) => return failed,
            Err(e) if e == ENODEV => {
                dev_err!(
                    self.dev,
                    "msvm-gpu: {}: the device does not answer: not used again\n",
                    E::NAME
                );
                self.lost.store(true, Relaxed);
                return failed;
            }
            Err(_) => {}
        }
        dev_err!(
            self.dev,
            "msvm-gpu: {} lost (still busy {STOP_MS} ms after its reset): not used again, its memory kept\n",
            E::NAME
        );
        self.lost.store(true, Relaxed);
        ring.abandoned = true;
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
            .write(WithBase::of::<E>(), RING_CTRL::zeroed().with_reset(true));
        ring.tail = 0;
        // The registers are reached anew at each poll: no RCU read-side
        // section lasts across a sleep.
        wait_idle(|| {
            Some(
                self.bar
                    .try_access()?
                    .read(RING_STATUS::of::<E>())
                    .into_raw(),
            )
        })?;
        if let (Some(io), Some(buf)) = (self.bar.try_access(), ring.buf.as_ref()) {
            program::<E>(&io, buf);
        }
        Ok(())
    }

    /// Stops the engine for good, before its device goes: reset, ring and
    /// fence unset, idle, the interrupt's causes disabled; then the buffer
    /// is freed (kept if the engine did not stop). Waits for a run under
    /// way.
    pub(crate) fn shut_down(&self) {
        let mut ring = self.ring.lock();
        self.lost.store(true, Relaxed);
        if ring.buf.is_none() {
            return;
        }
        let stopped = self.stop(&mut ring);
        if let Some(io) = self.bar.try_access() {
            io.write_reg(IRQ_ENABLE::zeroed());
            io.write(WithBase::of::<E>(), RING_SIZE::zeroed());
            io.write(WithBase::of::<E>(), RING_LO::zeroed());
            io.write(WithBase::of::<E>(), RING_HI::zeroed());
            io.write(WithBase::of::<E>(), RING_FENCE_LO::zeroed());
            io.write(WithBase::of::<E>(), RING_FENCE_HI::zeroed());
        }
        if stopped.is_err() {
            dev_err!(
                self.dev,
                "msvm-gpu: {} did not stop at shutdown: its buffer is kept\n",
                E::NAME
            );
            ring.abandoned = true;
            core::mem::forget(ring.buf.take());
        } else {
            drop(ring.buf.take());
        }
    }
}

/// Names `buf` to the engine behind `io` as its ring and fence.
pub(super) fn program<E: Engine>(io: &pci::Bar<'_, { regs::END }>, buf: &Coherent<[u64]>) {
    let base = buf.dma_address();
    let fence = base + (FENCE * 8) as u64;
    io.write(
        WithBase::of::<E>(),
        RING_LO::zeroed().with_value(base as u32),
    );
    io.write(
        WithBase::of::<E>(),
        RING_HI::zeroed().with_value((base >> 32) as u32),
    );
    io.write(
        WithBase::of::<E>(),
        RING_SIZE::zeroed().with_value(RING as u32),
    );
    io.write(
        WithBase::of::<E>(),
        RING_FENCE_LO::zeroed().with_value(fence as u32),
    );
    io.write(
        WithBase::of::<E>(),
        RING_FENCE_HI::zeroed().with_value((fence >> 32) as u32),
    );
}

/// Waits until `status` (`RING_STATUS`; `None`: the device is unbound)
/// says idle and not halted, after a reset: `ENODEV` if it reads all ones
/// or `None`, `ETIMEDOUT` after [`STOP_MS`].
pub(super) fn wait_idle(status: impl Fn() -> Option<u32>) -> Result {
    let start = Instant::<Monotonic>::now();
    loop {
        let raw = status().ok_or(ENODEV)?;
        if raw == u32::MAX {
            return Err(ENODEV);
        }
        let s = RING_STATUS::from_raw(raw);
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
/// [`Queue::new`]): whoever holds the engine, no session outlasts the
/// binding.
pub(super) struct Stopper<E: Engine>(pub(super) Arc<Queue<E>>);

impl<E: Engine> Drop for Stopper<E> {
    fn drop(&mut self) {
        self.0.shut_down();
    }
}
