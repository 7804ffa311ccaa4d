//! Command queues: each runs the command lists submitted to it, in order,
//! on a thread of its own (the device's engine runs one job at a time per
//! ioctl, synchronously: the thread is the queue's asynchrony).
//!
//! A command that fails makes its submission's later data commands skip
//! (their events are still signaled and reset, so no host wait hangs); the
//! failure is returned by the submission's fence (`zeFenceHostSynchronize`)
//! and by the queue's next `zeCommandQueueSynchronize`, once, or by
//! `zeCommandQueueExecuteCommandLists` itself in synchronous mode.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use crate::cmdlist::{self, Cmd, CommandList};
use crate::device::{self, Device, COPY_ORDINAL};
use crate::handle::{self, Kind, Object};
use crate::result::{entry, input, output, ZeResult};
use crate::sync::{wait_until, Fence};
use crate::sys::*;

/// One submission.
struct Batch {
    cmds: Vec<Cmd>,
    seq: u64,
    fence: Option<Arc<Fence>>,
}

/// What the queue's thread has done.
#[derive(Debug, Default)]
struct Progress {
    /// Submissions made, and run.
    submitted: u64,
    done: u64,
    /// The first failure not yet returned.
    error: Option<ze_result_t>,
}

/// A command queue.
#[derive(Debug)]
pub(crate) struct Queue {
    device: Arc<Device>,
    synchronous: bool,
    progress: Mutex<Progress>,
    cv: Condvar,
    tx: Mutex<Option<Sender<Batch>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Batch({})", self.seq)
    }
}

impl Object for Queue {
    const KIND: Kind = Kind::CommandQueue;
}

impl Queue {
    fn progress(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The failure of a command since the last one returned, if any.
    pub(crate) fn take_error(&self) -> ZeResult {
        self.progress().error.take().map_or(Ok(()), Err)
    }

    /// Runs one submission (on the queue's thread): its result is kept for
    /// its fence and the queue's next synchronize before the fence is
    /// signaled. A panic (a bug) is `ZE_RESULT_ERROR_UNKNOWN`, and the
    /// submission still counts as run.
    fn run(&self, b: Batch) {
        let cmds = &b.cmds;
        let r = catch_unwind(AssertUnwindSafe(|| cmdlist::run_all(cmds, &self.device)))
            .unwrap_or(Err(ZE_RESULT_ERROR_UNKNOWN));
        let mut p = self.progress();
        p.done = p.done.max(b.seq);
        if let Err(e) = r {
            p.error.get_or_insert(e);
        }
        drop(p);
        if let Some(f) = &b.fence {
            f.complete(r);
        }
        self.cv.notify_all();
    }

    /// Waits until submission `seq` has run.
    fn wait(&self, seq: u64, timeout: u64) -> ZeResult {
        wait_until(&self.cv, self.progress(), timeout, |p| p.done >= seq).map(drop)
    }

    /// Stops the thread once it has run what was submitted.
    pub(crate) fn stop(&self) {
        drop(
            self.tx
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        if let Some(w) = self
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = w.join();
        }
    }

    /// A queue of `device`'s, with its thread.
    pub(crate) fn spawn(device: Arc<Device>, synchronous: bool) -> ZeResult<Arc<Self>> {
        let (tx, rx) = channel::<Batch>();
        let q = Arc::new(Queue {
            device,
            synchronous,
            progress: Mutex::default(),
            cv: Condvar::new(),
            tx: Mutex::new(Some(tx)),
            worker: Mutex::new(None),
        });
        let runner = Arc::downgrade(&q);
        let w = std::thread::Builder::new()
            .name("ze-msvm-queue".into())
            .spawn(move || {
                for b in rx {
                    match runner.upgrade() {
                        Some(q) => q.run(b),
                        None => break,
                    }
                }
            })
            .map_err(|_| ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)?;
        *q.worker.lock().unwrap_or_else(PoisonError::into_inner) = Some(w);
        Ok(q)
    }

    /// Submits `cmds` (and `fence`, signaled when they have run); on a
    /// synchronous queue, returns when they have.
    pub(crate) fn submit(&self, cmds: Vec<Cmd>, fence: Option<Arc<Fence>>) -> ZeResult {
        if let Some(f) = &fence {
            f.flag.reset();
        }
        // Numbered and sent under one lock: submissions from several
        // threads reach the thread in the order of their numbers, and a
        // submission counts once it is sent.
        let guard = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = guard.as_ref().ok_or(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)?;
        let seq = self.progress().submitted + 1;
        tx.send(Batch { cmds, seq, fence })
            .map_err(|_| ZE_RESULT_ERROR_DEVICE_LOST)?;
        self.progress().submitted = seq;
        drop(guard);
        if self.synchronous {
            self.wait(seq, u64::MAX)?;
            return self.take_error();
        }
        Ok(())
    }
}

/// The queue `h` names.
pub(crate) fn get(h: ze_command_queue_handle_t) -> ZeResult<Arc<Queue>> {
    handle::get(h)
}

/// `zeCommandQueueCreate`.
///
/// # Safety
///
/// `desc` must be null or valid for reading; `out` null or valid for
/// writing.
pub(crate) unsafe extern "C" fn create(
    ctx: ze_context_handle_t,
    dev: ze_device_handle_t,
    desc: *const ze_command_queue_desc_t,
    out: *mut ze_command_queue_handle_t,
) -> ze_result_t {
    entry(|| {
        crate::context::get(ctx)?;
        let device = device::get(dev)?;
        // SAFETY: the caller's contract.
        let desc = unsafe { input(desc) }?;
        if desc.ordinal != COPY_ORDINAL || desc.index != 0 {
            return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: the caller's contract.
        let out = unsafe { output(out) }?;
        let q = Queue::spawn(device, desc.mode == ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS)?;
        *out = handle::publish(q);
        Ok(())
    })
}

/// `zeCommandQueueDestroy`: waits for what was submitted to run.
pub(crate) extern "C" fn destroy(h: ze_command_queue_handle_t) -> ze_result_t {
    entry(|| {
        let q: Arc<Queue> = handle::retire(h)?;
        q.stop();
        Ok(())
    })
}

/// `zeCommandQueueExecuteCommandLists`.
///
/// # Safety
///
/// `lists` must be null or valid for reading `n` handles.
pub(crate) unsafe extern "C" fn execute(
    h: ze_command_queue_handle_t,
    n: u32,
    lists: *mut ze_command_list_handle_t,
    fence: ze_fence_handle_t,
) -> ze_result_t {
    entry(|| {
        let q = get(h)?;
        if n == 0 {
            return Err(ZE_RESULT_ERROR_INVALID_SIZE);
        }
        if lists.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        }
        let fence = if fence.is_null() {
            None
        } else {
            Some(crate::sync::fence(fence)?)
        };
        if fence.as_ref().is_some_and(|f| !Arc::ptr_eq(&f.queue, &q)) {
            return Err(ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT);
        }
        let mut cmds = Vec::new();
        for i in 0..n as usize {
            // SAFETY: `lists` holds `n` handles (the caller's contract).
            let l: Arc<CommandList> = cmdlist::get(unsafe { lists.add(i).read() })?;
            if !Arc::ptr_eq(l.device(), &q.device) {
                return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
            }
            cmds.extend(l.commands()?);
        }
        q.submit(cmds, fence)
    })
}

/// `zeCommandQueueSynchronize`.
pub(crate) extern "C" fn synchronize(h: ze_command_queue_handle_t, timeout: u64) -> ze_result_t {
    entry(|| {
        let q = get(h)?;
        let seq = q.progress().submitted;
        q.wait(seq, timeout)?;
        q.take_error()
    })
}
