//! Contexts, and the context entry points. A context holds the
//! allocations made through it (see `memory`).

use std::sync::{Arc, Mutex};

use crate::device;
use crate::driver::driver;
use crate::handle::{self, Kind, Object};
use crate::memory::Allocs;
use crate::result::{entry, input, output, retry, ZeResult};
use crate::sys::*;

/// A Level Zero context.
#[derive(Debug, Default)]
pub(crate) struct Context {
    pub(crate) allocs: Mutex<Allocs>,
}

impl Object for Context {
    const KIND: Kind = Kind::Context;
}

/// The context `h` names.
pub(crate) fn get(h: ze_context_handle_t) -> ZeResult<Arc<Context>> {
    handle::get(h)
}

/// `zeContextCreate`.
///
/// # Safety
///
/// `desc` must be null or valid for reading; `out` null or valid for
/// writing.
pub(crate) unsafe extern "C" fn create(
    h: ze_driver_handle_t,
    desc: *const ze_context_desc_t,
    out: *mut ze_context_handle_t,
) -> ze_result_t {
    entry(|| {
        driver(h)?;
        // SAFETY: the caller's contract.
        unsafe { input(desc) }?;
        // SAFETY: the caller's contract.
        let out = unsafe { output(out) }?;
        *out = handle::publish(Arc::new(Context::default()));
        Ok(())
    })
}

/// `zeContextCreateEx`: the devices it names are all the driver's.
///
/// # Safety
///
/// As for [`create`]; `devices` null or valid for `n` handles.
pub(crate) unsafe extern "C" fn create_ex(
    h: ze_driver_handle_t,
    desc: *const ze_context_desc_t,
    n: u32,
    devices: *mut ze_device_handle_t,
    out: *mut ze_context_handle_t,
) -> ze_result_t {
    if n > 0 && devices.is_null() {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    for i in 0..n as usize {
        // SAFETY: `devices` holds `n` handles (the caller's contract).
        if let Err(r) = device::get(unsafe { devices.add(i).read() }) {
            return r;
        }
    }
    // SAFETY: the caller's contract.
    unsafe { create(h, desc, out) }
}

/// `zeContextDestroy`: its allocations are freed.
pub(crate) extern "C" fn destroy(h: ze_context_handle_t) -> ze_result_t {
    entry(|| {
        let ctx: Arc<Context> = handle::retire(h)?;
        let allocs = std::mem::take(&mut *ctx.allocs.lock().map_err(|_| ZE_RESULT_ERROR_UNKNOWN)?);
        allocs.free_all()
    })
}

/// `zeContextGetStatus`.
pub(crate) extern "C" fn get_status(h: ze_context_handle_t) -> ze_result_t {
    entry(|| get(h).map(drop))
}

/// `zeContextSystemBarrier`: every operation of a queue is done when its
/// command lists' fence or synchronize says so; nothing more to wait for.
pub(crate) extern "C" fn system_barrier(
    h: ze_context_handle_t,
    d: ze_device_handle_t,
) -> ze_result_t {
    entry(|| {
        get(h)?;
        device::get(d).map(drop)
    })
}

/// The page range around `[ptr, ptr + size)`.
pub(crate) fn pages(ptr: usize, size: usize) -> ZeResult<(usize, usize)> {
    let page = crate::memory::PAGE;
    let start = ptr & !(page - 1);
    let end = ptr
        .checked_add(size)
        .and_then(|e| e.checked_next_multiple_of(page))
        .ok_or(ZE_RESULT_ERROR_INVALID_SIZE)?;
    Ok((start, end - start))
}

/// A PREFETCH of the pages around `[ptr, ptr + size)` to `place` by `d`:
/// nothing for 0 bytes.
fn prefetch(
    h: ze_context_handle_t,
    d: ze_device_handle_t,
    (ptr, size): (*mut std::ffi::c_void, usize),
    place: msvm_rt::Place,
) -> ZeResult<msvm_rt::MigrateOutcome> {
    get(h)?;
    let d = device::get(d)?;
    if ptr.is_null() {
        return Err(ZE_RESULT_ERROR_INVALID_NULL_POINTER);
    }
    if size == 0 {
        return Ok(msvm_rt::MigrateOutcome::default());
    }
    let (start, len) = pages(ptr as usize, size)?;
    retry(|| d.rt.prefetch(start, len, place))
}

/// `zeContextMakeMemoryResident`: a prefetch to the device; out of device
/// memory if some pages found no room.
pub(crate) extern "C" fn make_memory_resident(
    h: ze_context_handle_t,
    d: ze_device_handle_t,
    ptr: *mut std::ffi::c_void,
    size: usize,
) -> ze_result_t {
    entry(
        || match prefetch(h, d, (ptr, size), msvm_rt::Place::Here)? {
            m if m.no_vram > 0 => Err(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY),
            _ => Ok(()),
        },
    )
}

/// `zeContextEvictMemory`: a prefetch to system RAM.
pub(crate) extern "C" fn evict_memory(
    h: ze_context_handle_t,
    d: ze_device_handle_t,
    ptr: *mut std::ffi::c_void,
    size: usize,
) -> ze_result_t {
    entry(|| prefetch(h, d, (ptr, size), msvm_rt::Place::System).map(drop))
}
