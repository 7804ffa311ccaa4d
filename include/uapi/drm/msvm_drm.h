/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * msvm: multi-device shared virtual memory, user-space ABI.
 *
 * This header is the single source of msvm's ABI. The kernel module mirrors
 * it in src/uapi.rs (generated bindings are checked against it at build time)
 * and the user-space runtime crate checks its layouts against it in its tests.
 *
 * Conventions:
 *  - every struct is naturally aligned, has explicit padding, and every
 *    padding or reserved field must be zero on input (else -EINVAL) and is
 *    zeroed on output;
 *  - user pointers are carried in __u64 fields;
 *  - arrays are described by a pointer, an element count and an element
 *    size, so that elements can grow in later versions.
 */
#ifndef _UAPI_MSVM_DRM_H_
#define _UAPI_MSVM_DRM_H_

#include "drm.h"

#if defined(__cplusplus)
extern "C" {
#endif

/* Bumped on every ABI addition. */
#define MSVM_UAPI_VERSION 1

/* At most this many msvm devices are bound at once. */
#define MSVM_MAX_DEVICES 16

/* drm_msvm_query.device: describe the device the ioctl is issued on. */
#define MSVM_QUERY_SELF 0xffffffffu

/* drm_msvm_peer.flags */
/* The two devices can reach each other over PCIe peer-to-peer. */
#define MSVM_PEER_P2P (1u << 0)

/**
 * struct drm_msvm_peer - reachability of one other msvm device
 * @index: msvm device index of the peer
 * @distance: pci_p2pdma distance between the two devices, -1 if none
 * @flags: MSVM_PEER_*
 * @pad: must be zero
 */
struct drm_msvm_peer {
	__u32 index;
	__s32 distance;
	__u32 flags;
	__u32 pad;
};

/**
 * struct drm_msvm_query - DRM_IOCTL_MSVM_QUERY
 *
 * @device: in: MSVM_QUERY_SELF or an msvm device index (-ENOENT if no
 *          device has that index)
 * @version: out: MSVM_UAPI_VERSION of the running module
 * @index: out: msvm device index of the queried device
 * @num_devices: out: number of msvm devices bound
 * @pci_domain: out: PCI domain of the device
 * @pci_bdf: out: PCI bus << 8 | device << 3 | function
 * @vram_size: out: bytes of device memory (VRAM)
 * @peer_size: in: sizeof(struct drm_msvm_peer) as the caller knows it;
 *             must be exactly that size (-EINVAL otherwise) when
 *             @num_peers is not zero
 * @num_peers: in: capacity of @peers_ptr, in elements;
 *             out: number of other msvm devices (entries are filled up to
 *             the capacity given: call with 0 first to learn the count)
 * @peers_ptr: in: user pointer to an array of struct drm_msvm_peer
 *             (-EFAULT if it is not writable for @num_peers entries)
 * @flags: must be zero
 * @pad: must be zero
 * @reserved: must be zero
 */
struct drm_msvm_query {
	__u32 device;
	__u32 version;
	__u32 index;
	__u32 num_devices;
	__u32 pci_domain;
	__u32 pci_bdf;
	__u64 vram_size;
	__u32 peer_size;
	__u32 num_peers;
	__u64 peers_ptr;
	__u32 flags;
	__u32 pad;
	__u64 reserved[4];
};

#define DRM_MSVM_QUERY 0x00

#define DRM_IOCTL_MSVM_QUERY \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_MSVM_QUERY, struct drm_msvm_query)

#if defined(__cplusplus)
}
#endif

#endif /* _UAPI_MSVM_DRM_H_ */
