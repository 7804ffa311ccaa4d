//! The msvm ABI, mirrored from `include/uapi/drm/msvm_drm.h`.
//!
//! The layouts are checked against the C header by `tests/abi_layout.rs`,
//! which compiles a small C program against the real header.

/// `MSVM_UAPI_VERSION`.
pub const MSVM_UAPI_VERSION: u32 = 5;
/// `MSVM_MAX_DEVICES`.
pub const MSVM_MAX_DEVICES: u32 = 16;
/// `MSVM_QUERY_SELF`.
pub const MSVM_QUERY_SELF: u32 = 0xffff_ffff;
/// `MSVM_PEER_P2P`.
pub const MSVM_PEER_P2P: u32 = 1 << 0;

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
/// `MSVM_MIGRATE_TO_SYSTEM`.
pub const MSVM_MIGRATE_TO_SYSTEM: u32 = 0;
/// `MSVM_MIGRATE_TO_DEVICE`.
pub const MSVM_MIGRATE_TO_DEVICE: u32 = 1;

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
    pub reserved: [u64; 4],
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
    pub reserved: [u64; 2],
}

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
pub fn request_codes() -> [(&'static str, u64); 6] {
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
