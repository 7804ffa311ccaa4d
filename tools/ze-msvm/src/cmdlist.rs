//! Command lists, regular and immediate, and the commands they hold.
//!
//! A regular list records commands until it is closed, and runs them each
//! time it is submitted to a queue (see `queue`). An immediate list runs
//! each command as it is appended: a synchronous one in the caller's
//! thread (the call returns when it has run), the others on a queue of
//! their own (the call returns at once; a wait on an event the host signals
//! later waits there, not in the caller).
//!
//! The engine moves data as the device: FILL and COPY are msvm's EXEC jobs
//! on the list's device (their pages placed as their attributes say: see
//! `memory` and `attrs`), prefetch is PREFETCH, advice changes the
//! attributes of the range on every device.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use msvm_rt::{Exec, Place};

use crate::attrs::{Preferred, ATTRS};
use crate::context::{self, pages};
use crate::device::{self, now_ns, Device, COPY_ORDINAL};
use crate::driver::DRIVER;
use crate::handle::{self, Kind, Object};
use crate::queue::Queue;
use crate::result::{entry, input, output, retry, ZeResult};
use crate::sync::{events, Event};
use crate::sys::*;

/// Advice values of Level Zero 1.9 and later, beyond the 1.8 header's:
/// system memory is the preferred location, and its clearing.
pub(crate) const ADVICE_SET_SYSTEM_MEMORY_PREFERRED_LOCATION: ze_memory_advice_t = 8;
pub(crate) const ADVICE_CLEAR_SYSTEM_MEMORY_PREFERRED_LOCATION: ze_memory_advice_t = 9;

/// One recorded command.
#[derive(Debug, Clone)]
pub(crate) enum Cmd {
    Fill {
        dst: usize,
        pattern: Vec<u8>,
        size: usize,
    },
    Copy {
        dst: usize,
        src: usize,
        size: usize,
    },
    /// Writes the device's timestamp (nanoseconds) to `dst`, as a job.
    Timestamp {
        dst: usize,
    },
    Prefetch {
        ptr: usize,
        size: usize,
    },
    Advise {
        device: u32,
        ptr: usize,
        size: usize,
        advice: ze_memory_advice_t,
    },
    Signal(Arc<Event>),
    Wait(Arc<Event>),
    Reset(Arc<Event>),
}

impl Cmd {
    /// Whether it moves data (skipped after a failure in its submission).
    pub(crate) fn is_data(&self) -> bool {
        !matches!(self, Cmd::Signal(_) | Cmd::Wait(_) | Cmd::Reset(_))
    }

    /// Runs it on `d`.
    pub(crate) fn run(&self, d: &Device) -> ZeResult {
        match self {
            Cmd::Fill { dst, pattern, size } => {
                retry(|| d.rt.fill(pattern, *dst, *size, false)).map(drop)
            }
            Cmd::Copy { dst, src, size } => {
                retry(|| d.rt.exec(Exec::Copy { src: *src }, *dst, *size, false)).map(drop)
            }
            Cmd::Timestamp { dst } => {
                let t = now_ns();
                retry(|| d.rt.exec(Exec::Fill(t), *dst, 8, true)).map(drop)
            }
            Cmd::Prefetch { size: 0, .. } => Ok(()),
            Cmd::Prefetch { ptr, size } => {
                let (start, len) = pages(*ptr, *size)?;
                // Pages without room stay where they are: a hint.
                retry(|| d.rt.prefetch(start, len, Place::Here)).map(drop)
            }
            Cmd::Advise {
                device,
                ptr,
                size,
                advice,
            } => advise(*device, *ptr, *size, *advice),
            Cmd::Signal(e) => {
                let now = now_ns();
                e.signal(now, now);
                Ok(())
            }
            Cmd::Wait(e) => e.flag.wait(u64::MAX),
            Cmd::Reset(e) => {
                e.flag.reset();
                Ok(())
            }
        }
    }
}

/// Runs `cmds` on `d` in order; after a failure, the data commands are
/// skipped and the events' are still run (no host wait hangs): the first
/// failure.
///
/// An event's timestamps span the data commands from the last signal to
/// its own (the signal's time alone if there are none).
pub(crate) fn run_all(cmds: &[Cmd], d: &Device) -> ZeResult {
    let mut failed = Ok(());
    let mut since = None;
    for cmd in cmds {
        if let Cmd::Signal(e) = cmd {
            let now = now_ns();
            e.signal(since.take().unwrap_or(now), now);
            continue;
        }
        if failed.is_err() && cmd.is_data() {
            continue;
        }
        if cmd.is_data() {
            since.get_or_insert_with(now_ns);
        }
        if let Err(e) = cmd.run(d) {
            failed = failed.and(Err(e));
        }
    }
    failed
}

/// Applies `advice` for device `device` to the pages around
/// `[ptr, ptr + size)`, on every device's VM.
fn advise(device: u32, ptr: usize, size: usize, advice: ze_memory_advice_t) -> ZeResult {
    let (start, len) = pages(ptr, size)?;
    let f = |a: &mut crate::attrs::Attr| match advice {
        ZE_MEMORY_ADVICE_SET_READ_MOSTLY => a.read_mostly = true,
        ZE_MEMORY_ADVICE_CLEAR_READ_MOSTLY => a.read_mostly = false,
        ZE_MEMORY_ADVICE_SET_PREFERRED_LOCATION => a.preferred = Preferred::Device(device),
        ZE_MEMORY_ADVICE_CLEAR_PREFERRED_LOCATION
        | ADVICE_CLEAR_SYSTEM_MEMORY_PREFERRED_LOCATION => a.preferred = Preferred::Default,
        ADVICE_SET_SYSTEM_MEMORY_PREFERRED_LOCATION => a.preferred = Preferred::System,
        ZE_MEMORY_ADVICE_SET_NON_ATOMIC_MOSTLY => a.non_atomic = true,
        ZE_MEMORY_ADVICE_CLEAR_NON_ATOMIC_MOSTLY => a.non_atomic = false,
        ZE_MEMORY_ADVICE_BIAS_CACHED => a.bias = 1,
        ZE_MEMORY_ADVICE_BIAS_UNCACHED => a.bias = 2,
        _ => {}
    };
    ATTRS.update((start, start + len), f, DRIVER.devices())
}

/// What a list holds.
#[derive(Debug, Default)]
struct State {
    cmds: Vec<Cmd>,
    closed: bool,
}

/// How a list runs its commands.
#[derive(Debug)]
enum Mode {
    /// Recorded, run on submission.
    Regular,
    /// Run as appended, in the caller's thread (a synchronous immediate
    /// list).
    Inline,
    /// Run as appended, on a queue of the list's own (an immediate list of
    /// the default or asynchronous mode): the append returns at once, its
    /// result (a failure of an earlier command) comes with the next append.
    Queued(Arc<Queue>),
}

/// A command list.
#[derive(Debug)]
pub(crate) struct CommandList {
    device: Arc<Device>,
    mode: Mode,
    state: Mutex<State>,
}

impl Drop for CommandList {
    fn drop(&mut self) {
        if let Mode::Queued(q) = &self.mode {
            q.stop();
        }
    }
}

impl Object for CommandList {
    const KIND: Kind = Kind::CommandList;
}

impl CommandList {
    /// A new, empty list of `device`'s, published: its handle.
    fn publish(device: Arc<Device>, mode: Mode) -> ze_command_list_handle_t {
        handle::publish(Arc::new(CommandList {
            device,
            mode,
            state: Mutex::default(),
        }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The commands of a closed regular list, for a submission.
    pub(crate) fn commands(&self) -> ZeResult<Vec<Cmd>> {
        let s = self.state();
        if !matches!(self.mode, Mode::Regular) {
            return Err(ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE);
        }
        if !s.closed {
            return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
        }
        Ok(s.cmds.clone())
    }

    /// Appends `cmds`, after waits for `waits` and before a signal of
    /// `signal`: recorded, or run now on an immediate list.
    fn append(
        &self,
        waits: Vec<Arc<Event>>,
        cmds: Vec<Cmd>,
        signal: Option<Arc<Event>>,
    ) -> ZeResult {
        let all = waits
            .into_iter()
            .map(Cmd::Wait)
            .chain(cmds)
            .chain(signal.map(Cmd::Signal));
        match &self.mode {
            Mode::Inline => return run_all(&all.collect::<Vec<_>>(), &self.device),
            Mode::Queued(q) => {
                let earlier = q.take_error();
                q.submit(all.collect(), None)?;
                return earlier;
            }
            Mode::Regular => {}
        }
        let mut s = self.state();
        if s.closed {
            return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
        }
        s.cmds.extend(all);
        Ok(())
    }
}

impl CommandList {
    /// Appends `cmds` after waits for the `n` events at `waits` and before
    /// a signal of `sig` (if not null): the tail of every append.
    ///
    /// # Safety
    ///
    /// `waits` must be null or valid for reading `n` handles.
    unsafe fn append_with(
        &self,
        sig: ze_event_handle_t,
        n: u32,
        waits: *mut ze_event_handle_t,
        cmds: Vec<Cmd>,
    ) -> ZeResult {
        // SAFETY: the caller's contract.
        let waits = unsafe { events(n, waits) }?;
        self.append(waits, cmds, signal(sig)?)
    }
}

/// The list `h` names.
pub(crate) fn get(h: ze_command_list_handle_t) -> ZeResult<Arc<CommandList>> {
    handle::get(h)
}

/// The optional signal event.
fn signal(h: ze_event_handle_t) -> ZeResult<Option<Arc<Event>>> {
    if h.is_null() {
        Ok(None)
    } else {
        crate::sync::event(h).map(Some)
    }
}

/// `zeCommandListCreate`.
///
/// # Safety
///
/// `desc` must be null or valid for reading; `out` null or valid for
/// writing.
pub(crate) unsafe extern "C" fn create(
    ctx: ze_context_handle_t,
    dev: ze_device_handle_t,
    desc: *const ze_command_list_desc_t,
    out: *mut ze_command_list_handle_t,
) -> ze_result_t {
    entry(|| {
        context::get(ctx)?;
        let device = device::get(dev)?;
        // SAFETY: the caller's contract.
        let desc = unsafe { input(desc) }?;
        if desc.commandQueueGroupOrdinal != COPY_ORDINAL {
            return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: the caller's contract.
        let out = unsafe { output(out) }?;
        *out = CommandList::publish(device, Mode::Regular);
        Ok(())
    })
}

/// `zeCommandListCreateImmediate`.
///
/// # Safety
///
/// As for [`create`].
pub(crate) unsafe extern "C" fn create_immediate(
    ctx: ze_context_handle_t,
    dev: ze_device_handle_t,
    desc: *const ze_command_queue_desc_t,
    out: *mut ze_command_list_handle_t,
) -> ze_result_t {
    entry(|| {
        context::get(ctx)?;
        let device = device::get(dev)?;
        // SAFETY: the caller's contract.
        let desc = unsafe { input(desc) }?;
        if desc.ordinal != COPY_ORDINAL || desc.index != 0 {
            return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: the caller's contract.
        let out = unsafe { output(out) }?;
        let mode = if desc.mode == ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS {
            Mode::Inline
        } else {
            Mode::Queued(Queue::spawn(device.clone(), false)?)
        };
        *out = CommandList::publish(device, mode);
        Ok(())
    })
}

/// `zeCommandListDestroy`.
pub(crate) extern "C" fn destroy(h: ze_command_list_handle_t) -> ze_result_t {
    entry(|| handle::retire::<CommandList, _>(h).map(drop))
}

/// `zeCommandListClose`.
pub(crate) extern "C" fn close(h: ze_command_list_handle_t) -> ze_result_t {
    entry(|| {
        let l = get(h)?;
        l.state().closed = true;
        Ok(())
    })
}

/// `zeCommandListReset`.
pub(crate) extern "C" fn reset(h: ze_command_list_handle_t) -> ze_result_t {
    entry(|| {
        let l = get(h)?;
        *l.state() = State::default();
        Ok(())
    })
}

/// `zeCommandListAppendBarrier`: commands run in order; the waits and the
/// signal are what it adds.
///
/// # Safety
///
/// `waits` must be null or valid for reading `n` handles.
pub(crate) unsafe extern "C" fn append_barrier(
    h: ze_command_list_handle_t,
    sig: ze_event_handle_t,
    n: u32,
    waits: *mut ze_event_handle_t,
) -> ze_result_t {
    entry(|| {
        let l = get(h)?;
        // SAFETY: the caller's contract.
        unsafe { l.append_with(sig, n, waits, vec![]) }
    })
}

/// `zeCommandListAppendMemoryRangesBarrier`: as a barrier.
///
/// # Safety
///
/// As for [`append_barrier`]; the ranges are not read.
pub(crate) unsafe extern "C" fn append_ranges_barrier(
    h: ze_command_list_handle_t,
    _n_ranges: u32,
    _sizes: *const usize,
    _ranges: *mut *const c_void,
    sig: ze_event_handle_t,
    n: u32,
    waits: *mut ze_event_handle_t,
) -> ze_result_t {
    // SAFETY: the caller's contract.
    unsafe { append_barrier(h, sig, n, waits) }
}

/// The checks and the command of a copy.
fn copy_cmd(dst: usize, src: usize, size: usize) -> ZeResult<Vec<Cmd>> {
    if dst == 0 || src == 0 {
        return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
    }
    if size == 0 {
        return Ok(vec![]);
    }
    let (dend, send) = (
        dst.checked_add(size).ok_or(ZE_RESULT_ERROR_INVALID_SIZE)?,
        src.checked_add(size).ok_or(ZE_RESULT_ERROR_INVALID_SIZE)?,
    );
    if dst < send && src < dend {
        return Err(ZE_RESULT_ERROR_OVERLAPPING_REGIONS);
    }
    Ok(vec![Cmd::Copy { dst, src, size }])
}

/// `zeCommandListAppendMemoryCopy`: a COPY job of the list's device, from
/// and to any memory of the process.
///
/// # Safety
///
/// `waits` must be null or valid for reading `n` handles.
pub(crate) unsafe extern "C" fn append_copy(
    h: ze_command_list_handle_t,
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    sig: ze_event_handle_t,
    n: u32,
    waits: *mut ze_event_handle_t,
) -> ze_result_t {
    entry(|| {
        let l = get(h)?;
        let cmds = copy_cmd(dst as usize, src as usize, size)?;
        // SAFETY: the caller's contract.
        unsafe { l.append_with(sig, n, waits, cmds) }
    })
}

/// `zeCommandListAppendMemoryCopyFromContext`: as a copy (one process, one
/// address space).
///
/// # Safety
///
/// As for [`append_copy`].
pub(crate) unsafe extern "C" fn append_copy_from_context(
    h: ze_command_list_handle_t,
    dst: *mut c_void,
    ctx: ze_context_handle_t,
    src: *const c_void,
    size: usize,
    sig: ze_event_handle_t,
    n: u32,
    waits: *mut ze_event_handle_t,
) -> ze_result_t {
    if let Err(r) = context::get(ctx) {
        return r;
    }
    // SAFETY: the caller's contract.
    unsafe { append_copy(h, dst, src, size, sig, n, waits) }
}

/// The most rows a region copy takes (one job each).
const MAX_ROWS: u64 = 1 << 20;

/// The copies of a region: one per row of each slice (one for the whole
/// region when its rows and slices are contiguous on both sides).
#[allow(clippy::too_many_arguments)]
fn region_cmds(
    dst: usize,
    dr: &ze_copy_region_t,
    (dpitch, dslice): (u32, u32),
    src: usize,
    sr: &ze_copy_region_t,
    (spitch, sslice): (u32, u32),
) -> ZeResult<Vec<Cmd>> {
    if (dr.width, dr.height, dr.depth) != (sr.width, sr.height, sr.depth) {
        return Err(ZE_RESULT_ERROR_INVALID_ARGUMENT);
    }
    let (w, h, d) = (
        u64::from(dr.width),
        u64::from(dr.height.max(1)),
        u64::from(dr.depth.max(1)),
    );
    if w == 0 {
        return Ok(vec![]);
    }
    // Rows must not overlap (a single row needs no pitch), nor slices.
    let fits = |pitch: u32, slice: u32| {
        (h == 1 || w <= u64::from(pitch))
            && (d == 1 || h.saturating_mul(u64::from(pitch).max(w)) <= u64::from(slice))
    };
    if !fits(dpitch, dslice) || !fits(spitch, sslice) {
        return Err(ZE_RESULT_ERROR_INVALID_SIZE);
    }
    if h.saturating_mul(d) > MAX_ROWS {
        return Err(ZE_RESULT_ERROR_UNSUPPORTED_SIZE);
    }
    // Byte offset of row `y` of slice `z` of a region, checked.
    let at = |base: usize, r: &ze_copy_region_t, pitch: u32, slice: u32, y: u64, z: u64| {
        let off = (u64::from(r.originZ) + z)
            .checked_mul(u64::from(slice))
            .and_then(|a| {
                (u64::from(r.originY) + y)
                    .checked_mul(u64::from(pitch))
                    .and_then(|b| a.checked_add(b))
            })
            .and_then(|a| a.checked_add(u64::from(r.originX)))
            .and_then(|o| usize::try_from(o).ok())
            .and_then(|o| base.checked_add(o))
            .ok_or(ZE_RESULT_ERROR_INVALID_SIZE)?;
        off.checked_add(w as usize)
            .map(|_| off)
            .ok_or(ZE_RESULT_ERROR_INVALID_SIZE)
    };
    // The spans the two regions touch, first to last byte: they must not
    // overlap.
    let span = |base, r, pitch, slice| -> ZeResult<(usize, usize)> {
        Ok((
            at(base, r, pitch, slice, 0, 0)?,
            at(base, r, pitch, slice, h - 1, d - 1)? + w as usize,
        ))
    };
    let (ds, de) = span(dst, dr, dpitch, dslice)?;
    let (ss, se) = span(src, sr, spitch, sslice)?;
    if ds < se && ss < de {
        return Err(ZE_RESULT_ERROR_OVERLAPPING_REGIONS);
    }
    let mut cmds = Vec::new();
    for z in 0..d {
        for y in 0..h {
            let dp = at(dst, dr, dpitch, dslice, y, z)?;
            let sp = at(src, sr, spitch, sslice, y, z)?;
            cmds.extend(copy_cmd(dp, sp, w as usize)?);
        }
    }
    Ok(cmds)
}

/// `zeCommandListAppendMemoryCopyRegion`.
///
/// # Safety
///
/// `dst_region` and `src_region` must be null or valid for reading; `waits`
/// null or valid for `n` handles.
pub(crate) unsafe extern "C" fn append_copy_region(
    h: ze_command_list_handle_t,
    dst: *mut c_void,
    dst_region: *const ze_copy_region_t,
    dst_pitch: u32,
    dst_slice_pitch: u32,
    src: *const c_void,
    src_region: *const ze_copy_region_t,
    src_pitch: u32,
    src_slice_pitch: u32,
    sig: ze_event_handle_t,
    n: u32,
    waits: *mut ze_event_handle_t,
) -> ze_result_t {
    entry(|| {
        let l = get(h)?;
        // SAFETY: the caller's contract.
        let (dr, sr) = unsafe { (input(dst_region)?, input(src_region)?) };
        if dst.is_null() || src.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        }
        let cmds = region_cmds(
            dst as usize,
            dr,
            (dst_pitch, dst_slice_pitch),
            src as usize,
            sr,
            (src_pitch, src_slice_pitch),
        )?;
        // SAFETY: the caller's contract.
        unsafe { l.append_with(sig, n, waits, cmds) }
    })
}

/// `zeCommandListAppendMemoryFill`: a FILL job of the list's device with
/// the pattern (1 to 128 bytes; copied now).
///
/// # Safety
///
/// `pattern` must be null or valid for reading `pattern_size` bytes;
/// `waits` null or valid for `n` handles.
pub(crate) unsafe extern "C" fn append_fill(
    h: ze_command_list_handle_t,
    ptr: *mut c_void,
    pattern: *const c_void,
    pattern_size: usize,
    size: usize,
    sig: ze_event_handle_t,
    n: u32,
    waits: *mut ze_event_handle_t,
) -> ze_result_t {
    entry(|| {
        let l = get(h)?;
        if ptr.is_null() || pattern.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        }
        if !(1..=msvm_rt::abi::MSVM_EXEC_PATTERN_MAX as usize).contains(&pattern_size) {
            return Err(ZE_RESULT_ERROR_INVALID_SIZE);
        }
        // SAFETY: `pattern` holds `pattern_size` bytes (the caller's
        // contract), copied before the call returns.
        let pattern =
            unsafe { std::slice::from_raw_parts(pattern.cast::<u8>(), pattern_size) }.to_vec();
        let cmds = if size == 0 {
            vec![]
        } else {
            vec![Cmd::Fill {
                dst: ptr as usize,
                pattern,
                size,
            }]
        };
        // SAFETY: the caller's contract.
        unsafe { l.append_with(sig, n, waits, cmds) }
    })
}

/// `zeCommandListAppendWriteGlobalTimestamp`: a job writes the timestamp.
///
/// # Safety
///
/// `waits` must be null or valid for reading `n` handles.
pub(crate) unsafe extern "C" fn append_write_global_timestamp(
    h: ze_command_list_handle_t,
    dst: *mut u64,
    sig: ze_event_handle_t,
    n: u32,
    waits: *mut ze_event_handle_t,
) -> ze_result_t {
    entry(|| {
        let l = get(h)?;
        if dst.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        }
        let cmd = Cmd::Timestamp { dst: dst as usize };
        // SAFETY: the caller's contract.
        unsafe { l.append_with(sig, n, waits, vec![cmd]) }
    })
}

/// `zeCommandListAppendMemoryPrefetch`: PREFETCH to the list's device.
pub(crate) extern "C" fn append_prefetch(
    h: ze_command_list_handle_t,
    ptr: *const c_void,
    size: usize,
) -> ze_result_t {
    entry(|| {
        let l = get(h)?;
        if ptr.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        }
        pages(ptr as usize, size)?;
        let cmd = Cmd::Prefetch {
            ptr: ptr as usize,
            size,
        };
        l.append(vec![], vec![cmd], None)
    })
}

/// `zeCommandListAppendMemAdvise`.
pub(crate) extern "C" fn append_advise(
    h: ze_command_list_handle_t,
    dev: ze_device_handle_t,
    ptr: *const c_void,
    size: usize,
    advice: ze_memory_advice_t,
) -> ze_result_t {
    entry(|| {
        let l = get(h)?;
        let d = device::get(dev)?;
        if ptr.is_null() {
            return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        }
        if advice > ADVICE_CLEAR_SYSTEM_MEMORY_PREFERRED_LOCATION {
            return Err(ZE_RESULT_ERROR_INVALID_ENUMERATION);
        }
        pages(ptr as usize, size)?;
        let cmd = Cmd::Advise {
            device: d.info.index,
            ptr: ptr as usize,
            size,
            advice,
        };
        l.append(vec![], vec![cmd], None)
    })
}

/// `zeCommandListAppendSignalEvent`.
pub(crate) extern "C" fn append_signal_event(
    h: ze_command_list_handle_t,
    ev: ze_event_handle_t,
) -> ze_result_t {
    entry(|| {
        let l = get(h)?;
        let e = crate::sync::event(ev)?;
        l.append(vec![], vec![], Some(e))
    })
}

/// `zeCommandListAppendWaitOnEvents`.
///
/// # Safety
///
/// `waits` must be null or valid for reading `n` handles.
pub(crate) unsafe extern "C" fn append_wait_on_events(
    h: ze_command_list_handle_t,
    n: u32,
    waits: *mut ze_event_handle_t,
) -> ze_result_t {
    entry(|| {
        let l = get(h)?;
        // SAFETY: the caller's contract.
        let waits = unsafe { events(n, waits) }?;
        l.append(waits, vec![], None)
    })
}

/// `zeCommandListAppendEventReset`.
pub(crate) extern "C" fn append_event_reset(
    h: ze_command_list_handle_t,
    ev: ze_event_handle_t,
) -> ze_result_t {
    entry(|| {
        let l = get(h)?;
        let e = crate::sync::event(ev)?;
        l.append(vec![], vec![Cmd::Reset(e)], None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(x: u32, y: u32, z: u32, w: u32, h: u32, d: u32) -> ze_copy_region_t {
        ze_copy_region_t {
            originX: x,
            originY: y,
            originZ: z,
            width: w,
            height: h,
            depth: d,
        }
    }

    /// The (dst, src, size) of the copies of a region.
    fn rows(cmds: &[Cmd]) -> Vec<(usize, usize, usize)> {
        cmds.iter()
            .map(|c| match c {
                Cmd::Copy { dst, src, size } => (*dst, *src, *size),
                _ => panic!("not a copy"),
            })
            .collect()
    }

    #[test]
    fn region_rows_and_slices() {
        let r = region_cmds(
            0x10000,
            &region(1, 2, 1, 4, 2, 2),
            (16, 64),
            0x20000,
            &region(0, 0, 0, 4, 2, 2),
            (8, 16),
        )
        .unwrap();
        assert_eq!(
            rows(&r),
            vec![
                (0x10000 + 64 + 32 + 1, 0x20000, 4),
                (0x10000 + 64 + 48 + 1, 0x20000 + 8, 4),
                (0x10000 + 128 + 32 + 1, 0x20000 + 16, 4),
                (0x10000 + 128 + 48 + 1, 0x20000 + 24, 4),
            ]
        );
        // Depth 0 and no slice pitch: one slice; width 0: nothing.
        let one = region_cmds(
            0x1000,
            &region(0, 0, 0, 4, 1, 0),
            (0, 0),
            0x9000,
            &region(0, 0, 0, 4, 1, 0),
            (0, 0),
        );
        assert_eq!(rows(&one.unwrap()), vec![(0x1000, 0x9000, 4)]);
        let none = region_cmds(
            0x1000,
            &region(0, 0, 0, 0, 0, 0),
            (0, 0),
            0x9000,
            &region(0, 0, 0, 0, 0, 0),
            (0, 0),
        );
        assert!(none.unwrap().is_empty());
    }

    #[test]
    fn region_errors() {
        let r = region(0, 0, 0, 16, 4, 1);
        // The source's rows 1-3 lie under the destination's.
        assert_eq!(
            region_cmds(0x1040, &r, (32, 0), 0x1000, &r, (32, 0)).err(),
            Some(ZE_RESULT_ERROR_OVERLAPPING_REGIONS)
        );
        // Rows longer than their pitch; sizes that differ.
        assert_eq!(
            region_cmds(0x1000, &r, (8, 0), 0x9000, &r, (32, 0)).err(),
            Some(ZE_RESULT_ERROR_INVALID_SIZE)
        );
        assert_eq!(
            region_cmds(
                0x1000,
                &r,
                (32, 0),
                0x9000,
                &region(0, 0, 0, 8, 4, 1),
                (32, 0)
            )
            .err(),
            Some(ZE_RESULT_ERROR_INVALID_ARGUMENT)
        );
        // Offsets that overflow, and too many rows.
        let far = region(u32::MAX, u32::MAX, u32::MAX, 1, 2, 2);
        assert_eq!(
            region_cmds(
                usize::MAX - 8,
                &far,
                (u32::MAX, u32::MAX),
                0x1000,
                &far,
                (u32::MAX, u32::MAX)
            )
            .err(),
            Some(ZE_RESULT_ERROR_INVALID_SIZE)
        );
        let many = region(0, 0, 0, 1, 1 << 16, 1 << 8);
        assert_eq!(
            region_cmds(0, &many, (1, 1 << 16), 1 << 40, &many, (1, 1 << 16)).err(),
            Some(ZE_RESULT_ERROR_UNSUPPORTED_SIZE)
        );
    }

    #[test]
    fn copies_refuse_overlap_and_null() {
        assert_eq!(
            copy_cmd(0x1000, 0x1010, 0x20).err(),
            Some(ZE_RESULT_ERROR_OVERLAPPING_REGIONS)
        );
        assert_eq!(
            copy_cmd(0, 0x1010, 0x20).err(),
            Some(ZE_RESULT_ERROR_INVALID_NULL_POINTER)
        );
        assert!(copy_cmd(0x1000, 0x1020, 0x20).unwrap().len() == 1);
        assert!(copy_cmd(0x1000, 0x1020, 0).unwrap().is_empty());
        assert_eq!(
            copy_cmd(usize::MAX, 0x1020, 2).err(),
            Some(ZE_RESULT_ERROR_INVALID_SIZE)
        );
    }
}
