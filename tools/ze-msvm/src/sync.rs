//! Synchronization: fences, event pools and events, on one primitive (a
//! flag the host can wait for, with Level Zero's timeouts).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::context;
use crate::handle::{self, Kind, Object};
use crate::queue::Queue;
use crate::result::{entry, input, output, ZeResult};
use crate::sys::*;

/// Waits on `cv` with `guard` until `done(&*guard)`, for at most `timeout`
/// nanoseconds (`u64::MAX`: for ever; 0: only looks): `ZE_RESULT_NOT_READY`
/// if the time runs out first.
pub(crate) fn wait_until<'a, T>(
    cv: &Condvar,
    mut guard: MutexGuard<'a, T>,
    timeout: u64,
    done: impl Fn(&T) -> bool,
) -> ZeResult<MutexGuard<'a, T>> {
    let until = (timeout != u64::MAX).then(|| Instant::now() + Duration::from_nanos(timeout));
    while !done(&guard) {
        guard = match until {
            None => cv.wait(guard).unwrap_or_else(PoisonError::into_inner),
            Some(t) => {
                let left = t.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ZE_RESULT_NOT_READY);
                }
                cv.wait_timeout(guard, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
        };
    }
    Ok(guard)
}

/// A flag that the host waits for.
#[derive(Debug, Default)]
pub(crate) struct Flag {
    set: Mutex<bool>,
    cv: Condvar,
}

impl Flag {
    fn new(set: bool) -> Self {
        Self {
            set: Mutex::new(set),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, bool> {
        self.set.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set(&self) {
        *self.lock() = true;
        self.cv.notify_all();
    }

    pub(crate) fn reset(&self) {
        *self.lock() = false;
    }

    pub(crate) fn is_set(&self) -> bool {
        *self.lock()
    }

    /// Waits until it is set (see [`wait_until`] for `timeout`).
    pub(crate) fn wait(&self, timeout: u64) -> ZeResult {
        wait_until(&self.cv, self.lock(), timeout, |&s| s).map(drop)
    }

    fn status(&self) -> ZeResult {
        if self.is_set() {
            Ok(())
        } else {
            Err(ZE_RESULT_NOT_READY)
        }
    }
}

/// A fence: signaled when the command lists of the submission it came with
/// have run, with that submission's result.
#[derive(Debug)]
pub(crate) struct Fence {
    pub(crate) queue: Arc<Queue>,
    pub(crate) flag: Flag,
    result: Mutex<ZeResult>,
}

impl Fence {
    /// Its submission has run, with `r`.
    pub(crate) fn complete(&self, r: ZeResult) {
        *self.result.lock().unwrap_or_else(PoisonError::into_inner) = r;
        self.flag.set();
    }
}

impl Object for Fence {
    const KIND: Kind = Kind::Fence;
}

/// An event pool: its events' number.
#[derive(Debug)]
pub(crate) struct EventPool {
    count: u32,
}

impl Object for EventPool {
    const KIND: Kind = Kind::EventPool;
}

/// An event.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) flag: Flag,
    /// When the work it was signaled after ran (device clock, ns): from
    /// the start of the first data command since the previous signal of
    /// the same run to the signal.
    times: Mutex<(u64, u64)>,
}

impl Event {
    /// Signaled after work that ran from `start` to `end`.
    pub(crate) fn signal(&self, start: u64, end: u64) {
        *self.times.lock().unwrap_or_else(PoisonError::into_inner) = (start, end);
        self.flag.set();
    }
}

impl Object for Event {
    const KIND: Kind = Kind::Event;
}

/// The fence `h` names.
pub(crate) fn fence(h: ze_fence_handle_t) -> ZeResult<Arc<Fence>> {
    handle::get(h)
}

/// The event `h` names.
pub(crate) fn event(h: ze_event_handle_t) -> ZeResult<Arc<Event>> {
    handle::get(h)
}

/// The events of a wait list.
///
/// # Safety
///
/// `events` must be null or valid for reading `n` handles.
pub(crate) unsafe fn events(n: u32, events: *mut ze_event_handle_t) -> ZeResult<Vec<Arc<Event>>> {
    if n > 0 && events.is_null() {
        return Err(ZE_RESULT_ERROR_INVALID_SIZE);
    }
    (0..n as usize)
        // SAFETY: `events` holds `n` handles (the caller's contract).
        .map(|i| event(unsafe { events.add(i).read() }))
        .collect()
}

/// `zeFenceCreate`.
///
/// # Safety
///
/// `desc` must be null or valid for reading; `out` null or valid for
/// writing.
pub(crate) unsafe extern "C" fn fence_create(
    q: ze_command_queue_handle_t,
    desc: *const ze_fence_desc_t,
    out: *mut ze_fence_handle_t,
) -> ze_result_t {
    entry(|| {
        let queue = crate::queue::get(q)?;
        // SAFETY: the caller's contract.
        let desc = unsafe { input(desc) }?;
        if desc.flags & !ZE_FENCE_FLAG_SIGNALED != 0 {
            return Err(ZE_RESULT_ERROR_INVALID_ENUMERATION);
        }
        // SAFETY: the caller's contract.
        let out = unsafe { output(out) }?;
        let flag = Flag::new(desc.flags & ZE_FENCE_FLAG_SIGNALED != 0);
        *out = handle::publish(Arc::new(Fence {
            queue,
            flag,
            result: Mutex::new(Ok(())),
        }));
        Ok(())
    })
}

/// `zeFenceDestroy`.
pub(crate) extern "C" fn fence_destroy(h: ze_fence_handle_t) -> ze_result_t {
    entry(|| handle::retire::<Fence, _>(h).map(drop))
}

/// `zeFenceHostSynchronize`: the error of a command that failed in its
/// submission, if one did (see `queue`).
pub(crate) extern "C" fn fence_host_synchronize(h: ze_fence_handle_t, timeout: u64) -> ze_result_t {
    entry(|| {
        let f = fence(h)?;
        f.flag.wait(timeout)?;
        let r = *f.result.lock().unwrap_or_else(PoisonError::into_inner);
        r
    })
}

/// `zeFenceQueryStatus`.
pub(crate) extern "C" fn fence_query_status(h: ze_fence_handle_t) -> ze_result_t {
    entry(|| fence(h)?.flag.status())
}

/// `zeFenceReset`.
pub(crate) extern "C" fn fence_reset(h: ze_fence_handle_t) -> ze_result_t {
    entry(|| {
        fence(h)?.flag.reset();
        Ok(())
    })
}

/// `zeEventPoolCreate`.
///
/// # Safety
///
/// `desc` must be null or valid for reading; `devices` null or valid for
/// `n` handles; `out` null or valid for writing.
pub(crate) unsafe extern "C" fn pool_create(
    ctx: ze_context_handle_t,
    desc: *const ze_event_pool_desc_t,
    n: u32,
    devices: *mut ze_device_handle_t,
    out: *mut ze_event_pool_handle_t,
) -> ze_result_t {
    entry(|| {
        context::get(ctx)?;
        // SAFETY: the caller's contract.
        let desc = unsafe { input(desc) }?;
        if desc.count == 0 {
            return Err(ZE_RESULT_ERROR_INVALID_SIZE);
        }
        if n > 0 && devices.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_SIZE);
        }
        for i in 0..n as usize {
            // SAFETY: `devices` holds `n` handles.
            crate::device::get(unsafe { devices.add(i).read() })?;
        }
        // SAFETY: the caller's contract.
        let out = unsafe { output(out) }?;
        *out = handle::publish(Arc::new(EventPool { count: desc.count }));
        Ok(())
    })
}

/// `zeEventPoolDestroy`.
pub(crate) extern "C" fn pool_destroy(h: ze_event_pool_handle_t) -> ze_result_t {
    entry(|| handle::retire::<EventPool, _>(h).map(drop))
}

/// `zeEventCreate`.
///
/// # Safety
///
/// `desc` must be null or valid for reading; `out` null or valid for
/// writing.
pub(crate) unsafe extern "C" fn event_create(
    pool: ze_event_pool_handle_t,
    desc: *const ze_event_desc_t,
    out: *mut ze_event_handle_t,
) -> ze_result_t {
    entry(|| {
        let pool: Arc<EventPool> = handle::get(pool)?;
        // SAFETY: the caller's contract.
        let desc = unsafe { input(desc) }?;
        if desc.index >= pool.count {
            return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: the caller's contract.
        let out = unsafe { output(out) }?;
        *out = handle::publish(Arc::new(Event {
            flag: Flag::new(false),
            times: Mutex::new((0, 0)),
        }));
        Ok(())
    })
}

/// `zeEventDestroy`.
pub(crate) extern "C" fn event_destroy(h: ze_event_handle_t) -> ze_result_t {
    entry(|| handle::retire::<Event, _>(h).map(drop))
}

/// `zeEventHostSignal`.
pub(crate) extern "C" fn event_host_signal(h: ze_event_handle_t) -> ze_result_t {
    entry(|| {
        let now = crate::device::now_ns();
        event(h)?.signal(now, now);
        Ok(())
    })
}

/// `zeEventQueryKernelTimestamp`: when the commands before the signal ran,
/// on the device's clock (the same for the global and the context
/// figures); not ready until signaled.
///
/// # Safety
///
/// `out` must be null or valid for writing.
pub(crate) unsafe extern "C" fn event_query_kernel_timestamp(
    h: ze_event_handle_t,
    out: *mut ze_kernel_timestamp_result_t,
) -> ze_result_t {
    entry(|| {
        let e = event(h)?;
        // SAFETY: the caller's contract.
        let out = unsafe { output(out) }?;
        e.flag.status()?;
        let (start, end) = *e.times.lock().unwrap_or_else(PoisonError::into_inner);
        let t = ze_kernel_timestamp_data_t {
            kernelStart: start,
            kernelEnd: end,
        };
        *out = ze_kernel_timestamp_result_t {
            global: t,
            context: t,
        };
        Ok(())
    })
}

/// `zeEventHostSynchronize`.
pub(crate) extern "C" fn event_host_synchronize(h: ze_event_handle_t, timeout: u64) -> ze_result_t {
    entry(|| event(h)?.flag.wait(timeout))
}

/// `zeEventQueryStatus`.
pub(crate) extern "C" fn event_query_status(h: ze_event_handle_t) -> ze_result_t {
    entry(|| event(h)?.flag.status())
}

/// `zeEventHostReset`.
pub(crate) extern "C" fn event_host_reset(h: ze_event_handle_t) -> ze_result_t {
    entry(|| {
        event(h)?.flag.reset();
        Ok(())
    })
}
