//! The msvm ABI, mirrored from `include/uapi/drm/msvm_drm.h`.
//!
//! The layouts are checked against the C header by `tests/abi_layout.rs`,
//! which compiles a small C program against the real header.

/// `MSVM_UAPI_VERSION`.
pub const MSVM_UAPI_VERSION: u32 = 18;
/// `MSVM_MAX_DEVICES`.
pub const MSVM_MAX_DEVICES: u32 = 16;
/// `MSVM_SIZE_4K`: a migration step in 4 KiB pages.
pub const MSVM_SIZE_4K: usize = 0;
/// `MSVM_SIZE_64K`: a CPU fault's 64 KiB window.
pub const MSVM_SIZE_64K: usize = 1;
/// `MSVM_SIZE_2M`: a 2 MiB folio moved whole.
pub const MSVM_SIZE_2M: usize = 2;
/// `MSVM_SIZE_CLASSES`.
pub const MSVM_SIZE_CLASSES: usize = 3;
/// `MSVM_QUERY_SELF`.
pub const MSVM_QUERY_SELF: u32 = 0xffff_ffff;
/// `MSVM_PEER_P2P`.
pub const MSVM_PEER_P2P: u32 = 1 << 0;
/// `MSVM_PEER_BUS_ADDR`: P2P inside a switch, by bus address.
pub const MSVM_PEER_BUS_ADDR: u32 = 1 << 1;
/// `MSVM_PEER_HOST_BRIDGE`: P2P through the host bridge, DMA-mapped.
pub const MSVM_PEER_HOST_BRIDGE: u32 = 1 << 2;
/// `MSVM_PEER_COMMON_SWITCH`: the two meet at a switch.
pub const MSVM_PEER_COMMON_SWITCH: u32 = 1 << 3;
/// `MSVM_PEER_ACS_REDIRECT`: ACS redirect on the path between them.
pub const MSVM_PEER_ACS_REDIRECT: u32 = 1 << 4;

/// `DRM_IOCTL_BASE`.
pub const DRM_IOCTL_BASE: u8 = b'd';
/// `DRM_COMMAND_BASE`.
pub const DRM_COMMAND_BASE: u8 = 0x40;
/// `DRM_MSVM_QUERY`.
pub const DRM_MSVM_QUERY: u8 = 0x00;
/// `DRM_MSVM_VM_CREATE`.
pub const DRM_MSVM_VM_CREATE: u8 = 0x01;
/// `DRM_MSVM_VM_DESTROY`.
pub const DRM_MSVM_VM_DESTROY: u8 = 0x02;
/// `DRM_MSVM_MIGRATE`.
pub const DRM_MSVM_MIGRATE: u8 = 0x03;
/// `DRM_MSVM_STATS`.
pub const DRM_MSVM_STATS: u8 = 0x04;
/// `DRM_MSVM_EXEC`.
pub const DRM_MSVM_EXEC: u8 = 0x05;
/// `MSVM_EXEC_FILL`.
pub const MSVM_EXEC_FILL: u32 = 1;
/// `MSVM_EXEC_COPY`.
pub const MSVM_EXEC_COPY: u32 = 2;
/// `MSVM_EXEC_ATOMIC_ADD`.
pub const MSVM_EXEC_ATOMIC_ADD: u32 = 3;
/// `MSVM_EXEC_CHECKSUM`.
pub const MSVM_EXEC_CHECKSUM: u32 = 4;
/// `MSVM_EXEC_IN_PLACE`.
pub const MSVM_EXEC_IN_PLACE: u32 = 1 << 0;
/// `MSVM_EXEC_PATTERN_MAX`: the longest FILL pattern, in bytes.
pub const MSVM_EXEC_PATTERN_MAX: u32 = 128;
/// `MSVM_MIGRATE_TO_SYSTEM`.
pub const MSVM_MIGRATE_TO_SYSTEM: u32 = 0;
/// `MSVM_MIGRATE_TO_DEVICE`.
pub const MSVM_MIGRATE_TO_DEVICE: u32 = 1;
/// `DRM_MSVM_SET_ATTR`.
pub const DRM_MSVM_SET_ATTR: u8 = 0x06;
/// `DRM_MSVM_PREFETCH`.
pub const DRM_MSVM_PREFETCH: u8 = 0x07;
/// `DRM_MSVM_RESIDENCY`.
pub const DRM_MSVM_RESIDENCY: u8 = 0x08;
/// `MSVM_LOC_DEFAULT`.
pub const MSVM_LOC_DEFAULT: u32 = 0;
/// `MSVM_LOC_SYSTEM`.
pub const MSVM_LOC_SYSTEM: u32 = 1;
/// `MSVM_LOC_DEVICE`.
pub const MSVM_LOC_DEVICE: u32 = 2;
/// `MSVM_ACCESS_DEFAULT`.
pub const MSVM_ACCESS_DEFAULT: u32 = 0;
/// `MSVM_ACCESS_MIGRATE`.
pub const MSVM_ACCESS_MIGRATE: u32 = 1;
/// `MSVM_ACCESS_IN_PLACE`.
pub const MSVM_ACCESS_IN_PLACE: u32 = 2;
/// `MSVM_MAX_ATTR_RANGES`.
pub const MSVM_MAX_ATTR_RANGES: u32 = 4096;
/// `MSVM_ATTR_MIXED`.
pub const MSVM_ATTR_MIXED: u32 = 1 << 0;
/// `MSVM_ATTR_THRASH_OFF`.
pub const MSVM_ATTR_THRASH_OFF: u32 = 1 << 1;
/// `MSVM_ATTR_ACCESS_OFF`.
pub const MSVM_ATTR_ACCESS_OFF: u32 = 1 << 2;
/// `MSVM_ATTR_READ_MOSTLY`.
pub const MSVM_ATTR_READ_MOSTLY: u32 = 1 << 3;

/// `struct drm_msvm_peer`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DrmMsvmPeer {
    pub index: u32,
    pub distance: i32,
    pub flags: u32,
    pub pad: u32,
}

/// `struct drm_msvm_query`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DrmMsvmQuery {
    pub device: u32,
    pub version: u32,
    pub index: u32,
    pub num_devices: u32,
    pub pci_domain: u32,
    pub pci_bdf: u32,
    pub vram_size: u64,
    pub peer_size: u32,
    pub num_peers: u32,
    pub peers_ptr: u64,
    pub flags: u32,
    pub pad: u32,
    pub owner_group: u32,
    pub pad2: u32,
    pub reserved: [u64; 3],
}

/// `struct drm_msvm_vm_create` (and `struct drm_msvm_vm_destroy`, which
/// has the same layout).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DrmMsvmVmCreate {
    pub flags: u32,
    pub pad: u32,
    pub reserved: [u64; 2],
}

/// `struct drm_msvm_vm_destroy`.
pub type DrmMsvmVmDestroy = DrmMsvmVmCreate;

/// `struct drm_msvm_migrate`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DrmMsvmMigrate {
    pub addr: u64,
    pub length: u64,
    pub to: u32,
    pub flags: u32,
    pub moved: u64,
    pub already: u64,
    pub busy: u64,
    pub no_vram: u64,
    pub reserved: [u64; 2],
}

/// `struct drm_msvm_stats`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DrmMsvmStats {
    pub to_device: u64,
    pub to_system: u64,
    pub cpu_faults: u64,
    pub evicted: u64,
    pub resident: u64,
    pub no_vram: u64,
    pub chunks_live: u64,
    pub chunks_created: u64,
    pub vram_size: u64,
    pub chunk_size: u64,
    pub engine_vram_read: u64,
    pub engine_vram_written: u64,
    pub engine_sys_read: u64,
    pub engine_sys_written: u64,
    pub engine_p2p_read: u64,
    pub engine_p2p_written: u64,
    pub from_peer: u64,
    pub chunks_cached: u64,
    pub memmap_bytes: u64,
    pub chunks_destroyed: u64,
    pub shrink_scans: u64,
    pub shrink_freed: u64,
    pub shrink_moved: u64,
    pub shrink_home: u64,
    pub peer_read: [u64; MSVM_MAX_DEVICES as usize],
    pub peer_written: [u64; MSVM_MAX_DEVICES as usize],
    pub large_to_device: u64,
    pub large_to_system: u64,
    pub large_fallback: u64,
    pub phase_steps: [u64; MSVM_SIZE_CLASSES],
    pub phase_collect_us: [u64; MSVM_SIZE_CLASSES],
    pub phase_alloc_us: [u64; MSVM_SIZE_CLASSES],
    pub phase_copy_us: [u64; MSVM_SIZE_CLASSES],
    pub phase_install_us: [u64; MSVM_SIZE_CLASSES],
    pub job_count: u64,
    pub job_place_us: u64,
    pub job_walk_us: u64,
    pub job_bind_us: u64,
    pub job_exec_us: u64,
    pub evict_blocks: u64,
    pub evict_pages: u64,
    pub evict_demoted: u64,
    pub thrash_detected: u64,
    pub thrash_pinned: u64,
    pub thrash_unpinned: u64,
    pub thrash_avoided: u64,
    pub access_counted: u64,
    pub access_due: u64,
    pub access_moved: u64,
    pub replica_copied: u64,
    pub replica_hits: u64,
    pub replica_blocks: u64,
    pub replica_dropped: u64,
    pub cgroup_bytes: u64,
    pub cgroup_limited: u64,
    pub pt_hits: u64,
    pub pt_faults: u64,
    pub pt_bound: u64,
    pub pt_invalidations: u64,
    pub pt_zapped: u64,
    pub pt_zap_ns: u64,
    pub pt_bytes: u64,
    pub pt_replays: u64,
    pub fault_raised: u64,
    pub fault_batches: u64,
    pub fault_spans: u64,
    pub fault_pages: u64,
    pub fault_ns: u64,
    pub fault_full: u64,
    pub fault_own_spans: u64,
    pub fault_own_ns: u64,
    pub fault_dma_spans: u64,
    pub fault_dma_ns: u64,
    pub fault_p2p_spans: u64,
    pub fault_p2p_ns: u64,
    pub pt_tlb_hits: u64,
    pub pt_tlb_misses: u64,
    pub pt_tlb_invalidations: u64,
    pub evict_refaults: u64,
    pub reserved: [u64; 1],
}

/// `struct drm_msvm_exec`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DrmMsvmExec {
    pub op: u32,
    pub flags: u32,
    pub addr: u64,
    pub length: u64,
    pub src: u64,
    pub value: u64,
    pub result: u64,
    pub migrated: u64,
    pub pattern_size: u32,
    pub pad: u32,
    pub reserved: [u64; 1],
}

/// `struct drm_msvm_set_attr`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DrmMsvmSetAttr {
    pub addr: u64,
    pub length: u64,
    pub location: u32,
    pub device: u32,
    pub access: u32,
    pub flags: u32,
    pub reserved: [u64; 2],
}

/// `struct drm_msvm_prefetch`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DrmMsvmPrefetch {
    pub addr: u64,
    pub length: u64,
    pub location: u32,
    pub device: u32,
    pub flags: u32,
    pub pad: u32,
    pub moved: u64,
    pub already: u64,
    pub busy: u64,
    pub no_vram: u64,
    pub reserved: [u64; 2],
}

/// `struct drm_msvm_residency`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DrmMsvmResidency {
    pub addr: u64,
    pub length: u64,
    pub flags: u32,
    pub attr_flags: u32,
    pub location: u32,
    pub device: u32,
    pub access: u32,
    pub pad: u32,
    pub system: u64,
    pub none: u64,
    pub devices: [u64; MSVM_MAX_DEVICES as usize],
    pub pinned: u64,
    pub replicas: [u64; MSVM_MAX_DEVICES as usize],
    pub reserved: [u64; 1],
}

nix::ioctl_readwrite!(
    /// `DRM_IOCTL_MSVM_SET_ATTR`.
    drm_ioctl_msvm_set_attr,
    DRM_IOCTL_BASE,
    DRM_COMMAND_BASE + DRM_MSVM_SET_ATTR,
    DrmMsvmSetAttr
);

nix::ioctl_readwrite!(
    /// `DRM_IOCTL_MSVM_PREFETCH`.
    drm_ioctl_msvm_prefetch,
    DRM_IOCTL_BASE,
    DRM_COMMAND_BASE + DRM_MSVM_PREFETCH,
    DrmMsvmPrefetch
);

nix::ioctl_readwrite!(
    /// `DRM_IOCTL_MSVM_RESIDENCY`.
    drm_ioctl_msvm_residency,
    DRM_IOCTL_BASE,
    DRM_COMMAND_BASE + DRM_MSVM_RESIDENCY,
    DrmMsvmResidency
);

nix::ioctl_readwrite!(
    /// `DRM_IOCTL_MSVM_EXEC`.
    drm_ioctl_msvm_exec,
    DRM_IOCTL_BASE,
    DRM_COMMAND_BASE + DRM_MSVM_EXEC,
    DrmMsvmExec
);

nix::ioctl_readwrite!(
    /// `DRM_IOCTL_MSVM_VM_CREATE`.
    drm_ioctl_msvm_vm_create,
    DRM_IOCTL_BASE,
    DRM_COMMAND_BASE + DRM_MSVM_VM_CREATE,
    DrmMsvmVmCreate
);

nix::ioctl_readwrite!(
    /// `DRM_IOCTL_MSVM_VM_DESTROY`.
    drm_ioctl_msvm_vm_destroy,
    DRM_IOCTL_BASE,
    DRM_COMMAND_BASE + DRM_MSVM_VM_DESTROY,
    DrmMsvmVmDestroy
);

nix::ioctl_readwrite!(
    /// `DRM_IOCTL_MSVM_MIGRATE`.
    drm_ioctl_msvm_migrate,
    DRM_IOCTL_BASE,
    DRM_COMMAND_BASE + DRM_MSVM_MIGRATE,
    DrmMsvmMigrate
);

nix::ioctl_readwrite!(
    /// `DRM_IOCTL_MSVM_STATS`.
    drm_ioctl_msvm_stats,
    DRM_IOCTL_BASE,
    DRM_COMMAND_BASE + DRM_MSVM_STATS,
    DrmMsvmStats
);

/// The request codes of every ioctl, by name, for layout checks.
pub fn request_codes() -> [(&'static str, u64); 9] {
    [
        ("DRM_IOCTL_MSVM_QUERY", query_request_code()),
        (
            "DRM_IOCTL_MSVM_VM_CREATE",
            nix::request_code_readwrite!(
                DRM_IOCTL_BASE,
                DRM_COMMAND_BASE + DRM_MSVM_VM_CREATE,
                size_of::<DrmMsvmVmCreate>()
            ) as u64,
        ),
        (
            "DRM_IOCTL_MSVM_VM_DESTROY",
            nix::request_code_readwrite!(
                DRM_IOCTL_BASE,
                DRM_COMMAND_BASE + DRM_MSVM_VM_DESTROY,
                size_of::<DrmMsvmVmDestroy>()
            ) as u64,
        ),
        (
            "DRM_IOCTL_MSVM_MIGRATE",
            nix::request_code_readwrite!(
                DRM_IOCTL_BASE,
                DRM_COMMAND_BASE + DRM_MSVM_MIGRATE,
                size_of::<DrmMsvmMigrate>()
            ) as u64,
        ),
        (
            "DRM_IOCTL_MSVM_EXEC",
            nix::request_code_readwrite!(
                DRM_IOCTL_BASE,
                DRM_COMMAND_BASE + DRM_MSVM_EXEC,
                size_of::<DrmMsvmExec>()
            ) as u64,
        ),
        (
            "DRM_IOCTL_MSVM_STATS",
            nix::request_code_readwrite!(
                DRM_IOCTL_BASE,
                DRM_COMMAND_BASE + DRM_MSVM_STATS,
                size_of::<DrmMsvmStats>()
            ) as u64,
        ),
        (
            "DRM_IOCTL_MSVM_SET_ATTR",
            nix::request_code_readwrite!(
                DRM_IOCTL_BASE,
                DRM_COMMAND_BASE + DRM_MSVM_SET_ATTR,
                size_of::<DrmMsvmSetAttr>()
            ) as u64,
        ),
        (
            "DRM_IOCTL_MSVM_PREFETCH",
            nix::request_code_readwrite!(
                DRM_IOCTL_BASE,
                DRM_COMMAND_BASE + DRM_MSVM_PREFETCH,
                size_of::<DrmMsvmPrefetch>()
            ) as u64,
        ),
        (
            "DRM_IOCTL_MSVM_RESIDENCY",
            nix::request_code_readwrite!(
                DRM_IOCTL_BASE,
                DRM_COMMAND_BASE + DRM_MSVM_RESIDENCY,
                size_of::<DrmMsvmResidency>()
            ) as u64,
        ),
    ]
}

nix::ioctl_readwrite!(
    /// `DRM_IOCTL_MSVM_QUERY`.
    drm_ioctl_msvm_query,
    DRM_IOCTL_BASE,
    DRM_COMMAND_BASE + DRM_MSVM_QUERY,
    DrmMsvmQuery
);

/// The request code of `DRM_IOCTL_MSVM_QUERY`, for layout checks.
pub const fn query_request_code() -> u64 {
    nix::request_code_readwrite!(
        DRM_IOCTL_BASE,
        DRM_COMMAND_BASE + DRM_MSVM_QUERY,
        core::mem::size_of::<DrmMsvmQuery>()
    ) as u64
}
