// SPDX-License-Identifier: GPL-2.0

//! msvm's uAPI types and constants, as bindgen generated them from
//! `include/uapi/drm/msvm_drm.h` (the single source of the ABI): plain data,
//! re-exported so that the rest of the crate never names the bindings.

pub(crate) use super::bindings::{
    drm_msvm_exec, drm_msvm_migrate, drm_msvm_peer, drm_msvm_prefetch, drm_msvm_query,
    drm_msvm_residency, drm_msvm_set_attr, drm_msvm_stats, drm_msvm_vm_create, drm_msvm_vm_destroy,
    DRM_MSVM_EXEC, DRM_MSVM_MIGRATE, DRM_MSVM_PREFETCH, DRM_MSVM_QUERY, DRM_MSVM_RESIDENCY,
    DRM_MSVM_SET_ATTR, DRM_MSVM_STATS, DRM_MSVM_VM_CREATE, DRM_MSVM_VM_DESTROY,
    MSVM_ACCESS_DEFAULT, MSVM_ACCESS_IN_PLACE, MSVM_ACCESS_MIGRATE, MSVM_ATTR_ACCESS_OFF,
    MSVM_ATTR_MIXED, MSVM_ATTR_READ_MOSTLY, MSVM_ATTR_THRASH_OFF, MSVM_EXEC_ATOMIC_ADD,
    MSVM_EXEC_CHECKSUM, MSVM_EXEC_COPY, MSVM_EXEC_FILL, MSVM_EXEC_IN_PLACE, MSVM_EXEC_PATTERN_MAX,
    MSVM_LOC_DEFAULT, MSVM_LOC_DEVICE, MSVM_LOC_SYSTEM, MSVM_MAX_ATTR_RANGES, MSVM_MAX_DEVICES,
    MSVM_MIGRATE_TO_DEVICE, MSVM_MIGRATE_TO_SYSTEM, MSVM_PEER_ACS_REDIRECT, MSVM_PEER_BUS_ADDR,
    MSVM_PEER_COMMON_SWITCH, MSVM_PEER_HOST_BRIDGE, MSVM_PEER_P2P, MSVM_QUERY_SELF, MSVM_SIZE_2M,
    MSVM_SIZE_4K, MSVM_SIZE_64K, MSVM_SIZE_CLASSES, MSVM_UAPI_VERSION,
};
