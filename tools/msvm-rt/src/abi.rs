//! The msvm ABI, mirrored from `include/uapi/drm/msvm_drm.h`.
//!
//! The layouts are checked against the C header by `tests/abi_layout.rs`,
//! which compiles a small C program against the real header.

/// `MSVM_UAPI_VERSION`.
pub const MSVM_UAPI_VERSION: u32 = 1;
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
    pub reserved: [u64; 4],
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
