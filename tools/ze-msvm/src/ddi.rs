//! The DDI tables that the loader asks for.
//!
//! `build.rs` generates, from the headers, for every table `<table>`
//! (`ze_global`, `ze_driver`, ..., `zes_diagnostics`):
//!
//! - `stubbed_<table>()`: the table with every entry a typed stub that
//!   returns `ZE_RESULT_ERROR_UNSUPPORTED_FEATURE`;
//! - its exported getter (`zeGetGlobalProcAddrTable`, ...), which hands the
//!   loader `fill_<table>(stubbed_<table>())` through [`write_table`].
//!
//! The `fill_<table>` functions here set the entries that are implemented,
//! e.g. `t.pfnInit = Some(crate::driver::init);`: the compiler checks each
//! function against its header signature. A table with none yet is listed
//! in [`unimplemented_tables!`]; to implement one, move it out of the list
//! into a function of its own.

use crate::sys::*;
use crate::{cmdlist, context, device, driver, memory, queue, sync};

/// The generated stubs, tables and getters (`$OUT_DIR/stubs.rs`).
mod stubs {
    // Its unsafe blocks carry one blanket SAFETY comment, at its top.
    #![allow(non_snake_case, clippy::undocumented_unsafe_blocks)]

    use crate::sys::*;

    include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
}

/// A version's major number (`ZE_MAJOR_VERSION`).
const fn major(version: ze_api_version_t) -> u32 {
    version >> 16
}

/// The body of every table getter: writes `make()` to `table` if the loader
/// asks for a version we can serve.
///
/// A version older than the one the tables are built from is refused: its
/// table may be smaller than ours, and we must not write past it. A newer
/// minor version's table is a superset of ours (new entries at the end,
/// which we leave as the loader set them).
///
/// # Safety
///
/// `table` must be null or valid for writing a `T`, when `version` is at
/// least `ZE_API_VERSION_CURRENT` with the same major number (the Level Zero
/// getter contract: the loader passes a table of the version it asks for).
pub(crate) unsafe fn write_table<T>(
    version: ze_api_version_t,
    table: *mut T,
    make: impl FnOnce() -> T,
) -> ze_result_t {
    if table.is_null() {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    if major(version) != major(ZE_API_VERSION_CURRENT) || version < ZE_API_VERSION_CURRENT {
        return ZE_RESULT_ERROR_UNSUPPORTED_VERSION;
    }
    // SAFETY: `table` is non-null and, for this version, valid for writing a
    // `T` (the caller's contract). `ptr::write` drops nothing of the old
    // contents, which the loader may have left uninitialized.
    unsafe { table.write(make()) };
    ZE_RESULT_SUCCESS
}

/// A `fill_<table>` that returns the table unchanged, for each `fill_<table>:
/// <table type>` in the list.
macro_rules! unimplemented_tables {
    ($($fill:ident: $ty:ty,)*) => {
        $(
            pub(crate) fn $fill(t: $ty) -> $ty {
                t
            }
        )*
    };
}

pub(crate) fn fill_ze_global(mut t: ze_global_dditable_t) -> ze_global_dditable_t {
    t.pfnInit = Some(driver::init);
    t
}

pub(crate) fn fill_ze_driver(mut t: ze_driver_dditable_t) -> ze_driver_dditable_t {
    t.pfnGet = Some(driver::driver_get);
    t.pfnGetApiVersion = Some(driver::get_api_version);
    t.pfnGetProperties = Some(driver::get_properties);
    t.pfnGetIpcProperties = Some(driver::get_ipc_properties);
    t.pfnGetExtensionProperties = Some(driver::get_extension_properties);
    t.pfnGetExtensionFunctionAddress = Some(driver::get_extension_function_address);
    t
}

pub(crate) fn fill_ze_device(mut t: ze_device_dditable_t) -> ze_device_dditable_t {
    t.pfnGet = Some(device::device_get);
    t.pfnGetSubDevices = Some(device::get_sub_devices);
    t.pfnGetProperties = Some(device::get_properties);
    t.pfnGetComputeProperties = Some(device::get_compute_properties);
    t.pfnGetModuleProperties = Some(device::get_module_properties);
    t.pfnGetCommandQueueGroupProperties = Some(device::get_queue_group_properties);
    t.pfnGetMemoryProperties = Some(device::get_memory_properties);
    t.pfnGetMemoryAccessProperties = Some(device::get_memory_access_properties);
    t.pfnGetCacheProperties = Some(device::get_cache_properties);
    t.pfnGetImageProperties = Some(device::get_image_properties);
    t.pfnGetExternalMemoryProperties = Some(device::get_external_memory_properties);
    t.pfnGetP2PProperties = Some(device::get_p2p_properties);
    t.pfnCanAccessPeer = Some(device::can_access_peer);
    t.pfnGetStatus = Some(device::get_status);
    t.pfnGetGlobalTimestamps = Some(device::get_global_timestamps);
    t
}

pub(crate) fn fill_ze_context(mut t: ze_context_dditable_t) -> ze_context_dditable_t {
    t.pfnCreate = Some(context::create);
    t.pfnCreateEx = Some(context::create_ex);
    t.pfnDestroy = Some(context::destroy);
    t.pfnGetStatus = Some(context::get_status);
    t.pfnSystemBarrier = Some(context::system_barrier);
    t.pfnMakeMemoryResident = Some(context::make_memory_resident);
    t.pfnEvictMemory = Some(context::evict_memory);
    t
}

pub(crate) fn fill_ze_mem(mut t: ze_mem_dditable_t) -> ze_mem_dditable_t {
    t.pfnAllocHost = Some(memory::alloc_host);
    t.pfnAllocDevice = Some(memory::alloc_device);
    t.pfnAllocShared = Some(memory::alloc_shared);
    t.pfnFree = Some(memory::free);
    t.pfnGetAllocProperties = Some(memory::get_alloc_properties);
    t.pfnGetAddressRange = Some(memory::get_address_range);
    t
}

pub(crate) fn fill_ze_command_queue(
    mut t: ze_command_queue_dditable_t,
) -> ze_command_queue_dditable_t {
    t.pfnCreate = Some(queue::create);
    t.pfnDestroy = Some(queue::destroy);
    t.pfnExecuteCommandLists = Some(queue::execute);
    t.pfnSynchronize = Some(queue::synchronize);
    t
}

pub(crate) fn fill_ze_command_list(
    mut t: ze_command_list_dditable_t,
) -> ze_command_list_dditable_t {
    t.pfnCreate = Some(cmdlist::create);
    t.pfnCreateImmediate = Some(cmdlist::create_immediate);
    t.pfnDestroy = Some(cmdlist::destroy);
    t.pfnClose = Some(cmdlist::close);
    t.pfnReset = Some(cmdlist::reset);
    t.pfnAppendWriteGlobalTimestamp = Some(cmdlist::append_write_global_timestamp);
    t.pfnAppendBarrier = Some(cmdlist::append_barrier);
    t.pfnAppendMemoryRangesBarrier = Some(cmdlist::append_ranges_barrier);
    t.pfnAppendMemoryCopy = Some(cmdlist::append_copy);
    t.pfnAppendMemoryFill = Some(cmdlist::append_fill);
    t.pfnAppendMemoryCopyRegion = Some(cmdlist::append_copy_region);
    t.pfnAppendMemoryCopyFromContext = Some(cmdlist::append_copy_from_context);
    t.pfnAppendMemoryPrefetch = Some(cmdlist::append_prefetch);
    t.pfnAppendMemAdvise = Some(cmdlist::append_advise);
    t.pfnAppendSignalEvent = Some(cmdlist::append_signal_event);
    t.pfnAppendWaitOnEvents = Some(cmdlist::append_wait_on_events);
    t.pfnAppendEventReset = Some(cmdlist::append_event_reset);
    t
}

pub(crate) fn fill_ze_fence(mut t: ze_fence_dditable_t) -> ze_fence_dditable_t {
    t.pfnCreate = Some(sync::fence_create);
    t.pfnDestroy = Some(sync::fence_destroy);
    t.pfnHostSynchronize = Some(sync::fence_host_synchronize);
    t.pfnQueryStatus = Some(sync::fence_query_status);
    t.pfnReset = Some(sync::fence_reset);
    t
}

pub(crate) fn fill_ze_event_pool(mut t: ze_event_pool_dditable_t) -> ze_event_pool_dditable_t {
    t.pfnCreate = Some(sync::pool_create);
    t.pfnDestroy = Some(sync::pool_destroy);
    t
}

pub(crate) fn fill_ze_module(mut t: ze_module_dditable_t) -> ze_module_dditable_t {
    t.pfnCreate = Some(device::module_create);
    t
}

pub(crate) fn fill_ze_virtual_mem(mut t: ze_virtual_mem_dditable_t) -> ze_virtual_mem_dditable_t {
    t.pfnQueryPageSize = Some(memory::query_page_size);
    t
}

pub(crate) fn fill_ze_event(mut t: ze_event_dditable_t) -> ze_event_dditable_t {
    t.pfnCreate = Some(sync::event_create);
    t.pfnDestroy = Some(sync::event_destroy);
    t.pfnHostSignal = Some(sync::event_host_signal);
    t.pfnHostSynchronize = Some(sync::event_host_synchronize);
    t.pfnQueryStatus = Some(sync::event_query_status);
    t.pfnHostReset = Some(sync::event_host_reset);
    t.pfnQueryKernelTimestamp = Some(sync::event_query_kernel_timestamp);
    t
}

unimplemented_tables! {
    fill_ze_device_exp: ze_device_exp_dditable_t,
    fill_ze_image: ze_image_dditable_t,
    fill_ze_image_exp: ze_image_exp_dditable_t,
    fill_ze_event_exp: ze_event_exp_dditable_t,
    fill_ze_module_build_log: ze_module_build_log_dditable_t,
    fill_ze_kernel: ze_kernel_dditable_t,
    fill_ze_kernel_exp: ze_kernel_exp_dditable_t,
    fill_ze_sampler: ze_sampler_dditable_t,
    fill_ze_physical_mem: ze_physical_mem_dditable_t,
    fill_ze_fabric_vertex_exp: ze_fabric_vertex_exp_dditable_t,
    fill_ze_fabric_edge_exp: ze_fabric_edge_exp_dditable_t,
    fill_zet_device: zet_device_dditable_t,
    fill_zet_context: zet_context_dditable_t,
    fill_zet_command_list: zet_command_list_dditable_t,
    fill_zet_module: zet_module_dditable_t,
    fill_zet_kernel: zet_kernel_dditable_t,
    fill_zet_metric_group: zet_metric_group_dditable_t,
    fill_zet_metric_group_exp: zet_metric_group_exp_dditable_t,
    fill_zet_metric: zet_metric_dditable_t,
    fill_zet_metric_streamer: zet_metric_streamer_dditable_t,
    fill_zet_metric_query_pool: zet_metric_query_pool_dditable_t,
    fill_zet_metric_query: zet_metric_query_dditable_t,
    fill_zet_tracer_exp: zet_tracer_exp_dditable_t,
    fill_zet_debug: zet_debug_dditable_t,
    fill_zes_driver: zes_driver_dditable_t,
    fill_zes_device: zes_device_dditable_t,
    fill_zes_scheduler: zes_scheduler_dditable_t,
    fill_zes_performance_factor: zes_performance_factor_dditable_t,
    fill_zes_power: zes_power_dditable_t,
    fill_zes_frequency: zes_frequency_dditable_t,
    fill_zes_engine: zes_engine_dditable_t,
    fill_zes_standby: zes_standby_dditable_t,
    fill_zes_firmware: zes_firmware_dditable_t,
    fill_zes_memory: zes_memory_dditable_t,
    fill_zes_fabric_port: zes_fabric_port_dditable_t,
    fill_zes_temperature: zes_temperature_dditable_t,
    fill_zes_psu: zes_psu_dditable_t,
    fill_zes_fan: zes_fan_dditable_t,
    fill_zes_led: zes_led_dditable_t,
    fill_zes_ras: zes_ras_dditable_t,
    fill_zes_diagnostics: zes_diagnostics_dditable_t,
}

#[cfg(test)]
mod tests {
    use super::stubs::{zeGetDriverProcAddrTable, zeGetGlobalProcAddrTable};
    use super::*;

    const fn version(major: u32, minor: u32) -> ze_api_version_t {
        (major << 16) | minor
    }

    #[test]
    fn getter_refuses_null_and_other_versions() {
        let mut t = ze_global_dditable_t::default();
        // SAFETY: a null table is refused before anything is written.
        let r = unsafe { zeGetGlobalProcAddrTable(ZE_API_VERSION_CURRENT, core::ptr::null_mut()) };
        assert_eq!(r, ZE_RESULT_ERROR_INVALID_NULL_POINTER);
        for v in [version(1, 3), version(2, 4), ZE_API_VERSION_1_0] {
            // SAFETY: `t` is a live table; these versions are refused.
            let r = unsafe { zeGetGlobalProcAddrTable(v, &mut t) };
            assert_eq!(r, ZE_RESULT_ERROR_UNSUPPORTED_VERSION, "{v:#x}");
        }
        assert!(t.pfnInit.is_none());
    }

    #[test]
    fn getter_fills_real_entries_and_stubs() {
        let mut t = ze_driver_dditable_t::default();
        for v in [ZE_API_VERSION_CURRENT, version(1, 12)] {
            // SAFETY: `t` is a live table of this header's version.
            let r = unsafe { zeGetDriverProcAddrTable(v, &mut t) };
            assert_eq!(r, ZE_RESULT_SUCCESS, "{v:#x}");
        }
        let get = t.pfnGet.unwrap();
        let mut count = 0;
        // SAFETY: `count` is a live u32; no handles are written for 0.
        let r = unsafe { get(&mut count, core::ptr::null_mut()) };
        assert_eq!((r, count), (ZE_RESULT_SUCCESS, 1));
        // Modules are not supported: every entry a stub.
        let mut m = ze_module_dditable_t::default();
        // SAFETY: `m` is a live table of this header's version.
        let r = unsafe { super::stubs::zeGetModuleProcAddrTable(ZE_API_VERSION_CURRENT, &mut m) };
        assert_eq!(r, ZE_RESULT_SUCCESS);
        // SAFETY: a stub reads none of its arguments.
        let r = unsafe { m.pfnDestroy.unwrap()(core::ptr::null_mut()) };
        assert_eq!(r, ZE_RESULT_ERROR_UNSUPPORTED_FEATURE);
    }
}
