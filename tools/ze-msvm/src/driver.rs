//! The driver object and its entry points (`zeInit`, `zeDriverGet`,
//! `zeDriverGetProperties`, ...).
//!
//! One driver, for every msvm render node of the machine: its devices are
//! opened, each with a VM of this process, on the first call that needs
//! them, and live as long as the process.

use std::ffi::{c_char, c_void};
use std::sync::{Arc, OnceLock};

use crate::device::Device;
use crate::handle;
use crate::result::{entry, fill_count, input, output, ZeResult};
use crate::sys::*;

/// The driver's version (`ze_driver_properties_t::driverVersion`): msvm's
/// uAPI version in the high half, this driver's revision in the low.
pub(crate) const DRIVER_VERSION: u32 = (msvm_rt::abi::MSVM_UAPI_VERSION << 16) | 1;

/// msvm's one Level Zero driver. Its handle is its address.
#[derive(Debug)]
pub(crate) struct Driver {
    devices: OnceLock<Vec<Arc<Device>>>,
}

/// The driver, for the life of the process.
pub(crate) static DRIVER: Driver = Driver {
    devices: OnceLock::new(),
};

impl Driver {
    /// The devices: every msvm render node this process could open and make
    /// a VM on, in node order.
    pub(crate) fn devices(&self) -> &[Arc<Device>] {
        self.devices.get_or_init(Device::open_all)
    }
}

/// `zeInit`.
///
/// msvm's devices are GPUs: with only `ZE_INIT_FLAG_VPU_ONLY`, there is
/// nothing to initialize.
pub(crate) extern "C" fn init(flags: ze_init_flags_t) -> ze_result_t {
    if flags & !(ZE_INIT_FLAG_GPU_ONLY | ZE_INIT_FLAG_VPU_ONLY) != 0 {
        return ZE_RESULT_ERROR_INVALID_ENUMERATION;
    }
    if flags != 0 && flags & ZE_INIT_FLAG_GPU_ONLY == 0 {
        return ZE_RESULT_ERROR_UNINITIALIZED;
    }
    entry(|| {
        DRIVER.devices();
        Ok(())
    })
}

/// `zeDriverGet`.
///
/// # Safety
///
/// `p_count` must be null or valid for reading and writing; if `*p_count`
/// is not 0, `ph_drivers` must be null or valid for `*p_count` handles.
pub(crate) unsafe extern "C" fn driver_get(
    p_count: *mut u32,
    ph_drivers: *mut ze_driver_handle_t,
) -> ze_result_t {
    let drivers = [handle::driver_handle(&DRIVER)];
    // SAFETY: the caller's contract.
    entry(|| unsafe { fill_count(p_count, ph_drivers, &drivers) })
}

/// `zeDriverGetApiVersion`: the version of the headers it is built from.
///
/// # Safety
///
/// `version` must be null or valid for writing.
pub(crate) unsafe extern "C" fn get_api_version(
    h: ze_driver_handle_t,
    version: *mut ze_api_version_t,
) -> ze_result_t {
    entry(|| {
        handle::driver(h)?;
        // SAFETY: the caller's contract.
        *unsafe { output(version) }? = ZE_API_VERSION_CURRENT;
        Ok(())
    })
}

/// `zeDriverGetProperties`.
///
/// # Safety
///
/// `props` must be null or valid for reading and writing.
pub(crate) unsafe extern "C" fn get_properties(
    h: ze_driver_handle_t,
    props: *mut ze_driver_properties_t,
) -> ze_result_t {
    entry(|| {
        handle::driver(h)?;
        // SAFETY: the caller's contract.
        let p = unsafe { output(props) }?;
        p.uuid.id = *b"msvm-ze-driver\0\x01";
        p.driverVersion = DRIVER_VERSION;
        Ok(())
    })
}

/// `zeDriverGetIpcProperties`: no IPC of memory or events.
///
/// # Safety
///
/// `props` must be null or valid for reading and writing.
pub(crate) unsafe extern "C" fn get_ipc_properties(
    h: ze_driver_handle_t,
    props: *mut ze_driver_ipc_properties_t,
) -> ze_result_t {
    entry(|| {
        handle::driver(h)?;
        // SAFETY: the caller's contract.
        unsafe { output(props) }?.flags = 0;
        Ok(())
    })
}

/// `zeDriverGetExtensionProperties`: none.
///
/// # Safety
///
/// As for [`fill_count`].
pub(crate) unsafe extern "C" fn get_extension_properties(
    h: ze_driver_handle_t,
    p_count: *mut u32,
    props: *mut ze_driver_extension_properties_t,
) -> ze_result_t {
    entry(|| {
        handle::driver(h)?;
        // SAFETY: the caller's contract.
        unsafe { fill_count(p_count, props, &[]) }
    })
}

/// `zeDriverGetExtensionFunctionAddress`: no extension functions.
///
/// # Safety
///
/// `name` must be null or a C string; `out` null or valid for writing.
pub(crate) unsafe extern "C" fn get_extension_function_address(
    h: ze_driver_handle_t,
    name: *const c_char,
    out: *mut *mut c_void,
) -> ze_result_t {
    entry(|| {
        handle::driver(h)?;
        // SAFETY: the caller's contract.
        unsafe { input(name) }?;
        // SAFETY: the caller's contract.
        *unsafe { output(out) }? = std::ptr::null_mut();
        Err(ZE_RESULT_ERROR_INVALID_ARGUMENT)
    })
}

/// The driver of `h`, for entry points that take one.
pub(crate) fn driver(h: ze_driver_handle_t) -> ZeResult<&'static Driver> {
    handle::driver(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_flags() {
        assert_eq!(init(0), ZE_RESULT_SUCCESS);
        assert_eq!(init(ZE_INIT_FLAG_GPU_ONLY), ZE_RESULT_SUCCESS);
        assert_eq!(init(ZE_INIT_FLAG_VPU_ONLY), ZE_RESULT_ERROR_UNINITIALIZED);
        assert_eq!(init(4), ZE_RESULT_ERROR_INVALID_ENUMERATION);
    }

    #[test]
    fn driver_get_count_protocol() {
        let mut count = 0;
        // SAFETY: `count` is a live u32; no handles are written for 0.
        let r = unsafe { driver_get(&mut count, core::ptr::null_mut()) };
        assert_eq!((r, count), (ZE_RESULT_SUCCESS, 1));
        let mut handles = [core::ptr::null_mut(); 4];
        count = 4;
        // SAFETY: `handles` has room for `count` handles.
        let r = unsafe { driver_get(&mut count, handles.as_mut_ptr()) };
        assert_eq!((r, count), (ZE_RESULT_SUCCESS, 1));
        assert!(handle::driver(handles[0]).is_ok());
        assert!(handles[1].is_null());
        // SAFETY: a null count is refused before anything is read.
        let r = unsafe { driver_get(core::ptr::null_mut(), handles.as_mut_ptr()) };
        assert_eq!(r, ZE_RESULT_ERROR_INVALID_NULL_POINTER);
    }
}
