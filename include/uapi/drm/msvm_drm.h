/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * msvm: multi-device shared virtual memory, user-space ABI.
 *
 * This header is the single source of msvm's ABI. The kernel module takes
 * its structs from it through bindgen (src/mm/bindings_generated.rs,
 * re-exported by src/mm/abi.rs) and the user-space runtime crate checks its
 * layouts against it in its tests.
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
#define MSVM_UAPI_VERSION 18

/* At most this many msvm devices are bound at once. */
#define MSVM_MAX_DEVICES 16

/* Size classes of migration steps (drm_msvm_stats.phase_*). */
#define MSVM_SIZE_4K 0
#define MSVM_SIZE_64K 1
#define MSVM_SIZE_2M 2
#define MSVM_SIZE_CLASSES 3

/* drm_msvm_query.device: describe the device the ioctl is issued on. */
#define MSVM_QUERY_SELF 0xffffffffu

/* drm_msvm_peer.flags */
/* The two devices can reach each other over PCIe peer-to-peer. */
#define MSVM_PEER_P2P (1u << 0)
/*
 * The path, as pci_p2pdma decides it (its map type) for the queried
 * device reading the peer's memory; neither with no P2P:
 * inside a switch, by the peer's PCI bus address, no IOMMU mapping
 * (PCI_P2PDMA_MAP_BUS_ADDR),
 */
#define MSVM_PEER_BUS_ADDR (1u << 1)
/* through the host bridge, DMA-mapped (PCI_P2PDMA_MAP_THRU_HOST_BRIDGE). */
#define MSVM_PEER_HOST_BRIDGE (1u << 2)
/*
 * Why (any path): the two meet at an upstream bridge below the host bridge
 * (a switch),
 */
#define MSVM_PEER_COMMON_SWITCH (1u << 3)
/* a port on the path between them has ACS redirect on. */
#define MSVM_PEER_ACS_REDIRECT (1u << 4)

/**
 * struct drm_msvm_peer - reachability of one other msvm device
 * @index: msvm device index of the peer
 * @distance: pci_p2pdma distance between the two devices, -1 if none
 * @flags: MSVM_PEER_*: whether there is a P2P path, which, and why (with
 *         MSVM_PEER_HOST_BRIDGE or none, not MSVM_PEER_COMMON_SWITCH
 *         without MSVM_PEER_ACS_REDIRECT: the host bridge passes P2P or
 *         not)
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
 * @owner_group: out: the device's owner group: devices of one group reach
 *               each other over P2P and work on each other's memory in
 *               place
 * @pad2: must be zero
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
	__u32 owner_group;
	__u32 pad2;
	__u64 reserved[3];
};

/**
 * struct drm_msvm_vm_create - DRM_IOCTL_MSVM_VM_CREATE
 *
 * Creates the VM of this open file: from now on the device works on the
 * address space of the calling process (its mm), and only that process may
 * use the VM (-EPERM from any other, e.g. a fork child that inherited the
 * file). One VM per open file (-EBUSY for a second).
 *
 * @flags: must be zero
 * @pad: must be zero
 * @reserved: must be zero
 */
struct drm_msvm_vm_create {
	__u32 flags;
	__u32 pad;
	__u64 reserved[2];
};

/**
 * struct drm_msvm_vm_destroy - DRM_IOCTL_MSVM_VM_DESTROY
 *
 * Destroys the VM of this open file (-ENOENT if there is none). Pages the
 * VM moved to the device stay there until the process touches them (they
 * come back to system RAM on CPU access), migrates them back, or the
 * device goes away.
 * Closing the file destroys the VM too.
 *
 * @flags: must be zero
 * @pad: must be zero
 * @reserved: must be zero
 */
struct drm_msvm_vm_destroy {
	__u32 flags;
	__u32 pad;
	__u64 reserved[2];
};

/* drm_msvm_migrate.to */
#define MSVM_MIGRATE_TO_SYSTEM 0
#define MSVM_MIGRATE_TO_DEVICE 1

/**
 * struct drm_msvm_migrate - DRM_IOCTL_MSVM_MIGRATE
 *
 * Moves the pages of [@addr, @addr + @length) of the VM's process to this
 * device's memory (MSVM_MIGRATE_TO_DEVICE) or back to system RAM
 * (MSVM_MIGRATE_TO_SYSTEM). Pages on a peer device move too: straight from
 * its memory over P2P when this device reaches it, through system RAM when
 * not. Partial success is success: the counters say what happened to every
 * page of the range (they add up to @length / 4096).
 *
 * Errors: -EINVAL: @addr or @length not 4 KiB aligned, @length zero, the
 * range wraps, @to unknown, non-zero @flags/@reserved; -EFAULT: a page
 * of the range is not mapped or is beyond the user address space; -EACCES:
 * part of the range has no read access (PROT_NONE); -ENOENT: no VM;
 * -EPERM: the VM belongs to another process; -ESRCH: that process is
 * exiting; -EINTR: the caller was killed (the call works in 2 MiB steps
 * and stops between two); -ENODEV: the device is going away (unbind,
 * unplug). A range with a hole or without access moves nothing; after
 * -EINTR, -ENODEV, or -EFAULT for a mapping changed during the call, the
 * steps already done stay done.
 *
 * @addr: in: start, page aligned
 * @length: in: bytes, page aligned, not zero
 * @to: in: MSVM_MIGRATE_TO_*
 * @flags: must be zero
 * @moved: out: pages moved
 * @already: out: pages that were already at the destination
 * @busy: out: pages the kernel would not move (pinned, shared, file-backed,
 *        secretmem, hugetlb, VM_IO/VM_PFNMAP, in use by another migration;
 *        towards system RAM, secretmem, hugetlb and special mappings count
 *        as @already: none of their pages can be on a device)
 * @no_vram: out: pages not moved for lack of device memory, or because
 *           the caller's dmem cgroup is at its dmem.max for the device
 * @reserved: must be zero
 */
struct drm_msvm_migrate {
	__u64 addr;
	__u64 length;
	__u32 to;
	__u32 flags;
	__u64 moved;
	__u64 already;
	__u64 busy;
	__u64 no_vram;
	__u64 reserved[2];
};

/**
 * struct drm_msvm_stats - DRM_IOCTL_MSVM_STATS
 *
 * Counters of this device since it was bound (in pages of 4 KiB unless said
 * otherwise).
 *
 * @to_device: pages migrated into this device's memory
 * @to_system: pages migrated out of it to system RAM (explicitly, by CPU
 *             faults and by eviction)
 * @cpu_faults: CPU faults on device pages (migrate_to_ram); each brings
 *              this device's pages of the 64 KiB around it back to system
 *              RAM (a 2 MiB device folio mapped whole: the whole folio)
 * @evicted: pages sent to system RAM because the device memory went away
 *           (unbind, unplug, module unload)
 * @resident: pages of device memory in use now
 * @no_vram: pages a migration could not move for lack of device memory
 *           (the cgroup limit's among them: also in @cgroup_limited)
 * @chunks_live: chunks of device memory with a pagemap now
 * @chunks_created: pagemaps created so far
 * @vram_size: bytes of device memory in chunks
 * @chunk_size: bytes per chunk
 * @engine_vram_read: bytes the engine read from this device's memory
 * @engine_vram_written: bytes the engine wrote to this device's memory
 * @engine_sys_read: bytes the engine read from system RAM (DMA)
 * @engine_sys_written: bytes the engine wrote to system RAM (DMA)
 * @engine_p2p_read: bytes the engine read from peers' memory over P2P
 * @engine_p2p_written: bytes the engine wrote to peers' memory over P2P
 * @from_peer: pages migrated into this device straight from a peer's
 *             memory over P2P (no system RAM copy)
 * @chunks_cached: chunks with a pagemap and no page in use (kept for cheap
 *                 reuse until the shrinker removes them)
 * @memmap_bytes: bytes of system RAM the pagemaps' struct pages take now
 * @chunks_destroyed: pagemaps removed so far (shrinker, debugfs)
 * @shrink_scans: shrink passes over this device
 * @shrink_freed: bytes of struct-page memory the shrink passes freed
 * @shrink_moved: pages the shrink passes moved into fuller chunks
 * @shrink_home: pages the shrink passes sent to system RAM (none today:
 *               consolidation only packs pages into fuller chunks; the
 *               name is historical, "home" meaning system RAM)
 * @peer_read: bytes the engine read from each peer's memory over P2P, by
 *             the peer's device index
 * @peer_written: bytes the engine wrote to each peer's memory over P2P
 * @large_to_device: 2 MiB folios (THPs, or 2 MiB of untouched memory)
 *                   migrated into this device whole, as one 2 MiB device
 *                   folio (their pages also count in @to_device)
 * @large_to_system: 2 MiB device folios of this device migrated to system
 *                   RAM whole, into a 2 MiB folio (explicitly, by a CPU
 *                   fault, by eviction; pages also count in @to_system)
 * @large_fallback: 2 MiB ranges that could have moved whole but went in
 *                  4 KiB pages: no free 2 MiB block of device memory, or
 *                  no free 2 MiB folio of system RAM, at the time
 * @phase_steps: migration steps this device ran, by size class
 *               (&MSVM_SIZE_4K: a step of up to 2 MiB in 4 KiB pages;
 *               &MSVM_SIZE_64K: a CPU fault's 64 KiB window;
 *               &MSVM_SIZE_2M: a 2 MiB folio moved whole), both ways
 * @phase_collect_us: microseconds those steps spent collecting their pages
 *                    (migrate_vma_setup: page-table walk, isolation,
 *                    unmapping), by size class
 * @phase_alloc_us: microseconds they spent allocating destinations
 * @phase_copy_us: microseconds they spent copying data
 * @phase_install_us: microseconds they spent installing the destinations
 *                    and finishing (migrate_vma_pages, _finalize)
 * @job_count: engine jobs (EXEC) run on this device
 * @job_place_us: microseconds the jobs spent moving pages where their
 *                placement wants them, before running
 * @job_walk_us: microseconds spent walking the process's page tables
 *               (hmm_range_fault, with the faults it takes)
 * @job_bind_us: microseconds spent building device page tables (DMA and
 *               P2P mappings)
 * @job_exec_us: microseconds spent running the operations themselves
 * @evict_blocks: 2 MiB blocks of this device's memory evicted to make room
 *                for a migration into it when it was full (module parameter
 *                evict; see Documentation/placement.rst)
 * @evict_pages: pages those evictions sent to system RAM (they also count
 *               in @to_system)
 * @evict_demoted: blocks the scan-resistant policy moved from its active
 *                 class to its inactive one instead of evicting them
 * @thrash_detected: 2 MiB blocks of a process found thrashing (moved
 *                   away thrash_threshold times, each within
 *                   thrash_lapse_ms of the move before) by this device's
 *                   jobs or CPU faults on its pages (module parameters
 *                   thrash*; see Documentation/placement.rst)
 * @thrash_pinned: those pinned (left where they are by every device's jobs
 *                 for thrash_pin_ms); the others thrash in bursts
 *                 (thrash_max_resets)
 * @thrash_unpinned: pins found expired
 * @thrash_avoided: blocks this device's jobs used where they were because
 *                  they were pinned, instead of moving them
 * @access_counted: accesses the access counters counted: pages this
 *                  device's jobs used in place from memory not its own
 *                  (system RAM, a peer's VRAM), one per page and job
 *                  (module parameters access_*; see
 *                  Documentation/placement.rst)
 * @access_due: 2 MiB blocks whose count reached access_threshold, taken
 *              by a placement pass of this device's, which then moved them
 *              here (unless pinned or the device had no room)
 * @access_moved: pages those moves brought to this device (they also
 *                count in @to_device)
 * @replica_copied: pages copied into read-only replicas in this device's
 *                  memory (MSVM_ATTR_READ_MOSTLY ranges)
 * @replica_hits: pages this device's jobs read from a replica made before
 * @replica_blocks: 2 MiB blocks of processes with replicas here now
 * @replica_dropped: such blocks whose replicas were dropped to make room
 *                   (for other replicas, for pages, by a shrink pass)
 * @cgroup_bytes: bytes of this device's memory charged to dmem cgroups now:
 *                what its dmem region (drm/<pci address>/vram) holds
 *                across all cgroups (since ABI version 13)
 * @cgroup_limited: pages that migrations into this device did not move
 *                  because the process's cgroup was at its dmem.max (they
 *                  also count in @no_vram; since ABI version 13)
 * @pt_hits: windows (up to 2 MiB of a job's destination) that this
 *           device's jobs ran straight from their VM's device page table:
 *           every page mapped with the access the job needs, no fault
 *           (since ABI version 14)
 * @pt_faults: windows that faulted: a page unmapped or mapped without the
 *             access the job needs; each was serviced (by the fault
 *             handler, or in the job's context) and its pages bound
 * @pt_bound: device page-table entries those faults wrote (kept ones, and
 *            those of pages used where they are, which serve later jobs
 *            in place only: Documentation/design.rst)
 * @pt_invalidations: invalidations of the process's page tables (munmap,
 *                    mprotect, migration, CPU copy-on-write, exit, ...)
 *                    that zapped entries of this device's tables
 * @pt_zapped: entries they zapped
 * @pt_zap_ns: nanoseconds they spent zapping (and invalidating the
 *             device's TLB)
 * @pt_bytes: bytes the device page tables of this device's VMs take now
 * @pt_replays: windows that ran from the table once the faults they raised
 *              were serviced (since ABI version 15)
 * @fault_raised: faults this device's jobs raised on its fault queue: spans
 *                of up to 2 MiB without the entries the job needs, of the
 *                missing window and of the windows after it (those a full
 *                queue had no room for are not counted)
 * @fault_batches: batches the device's fault handler took off the queue
 * @fault_spans: spans it serviced (a batch's faults grouped by VM, 2 MiB
 *               block and access, overlapping or adjacent ones merged)
 * @fault_pages: pages of those spans
 * @fault_ns: nanoseconds the handler spent servicing batches
 * @fault_full: raises that found the fault queue full (the faults that did
 *              not fit went back to their jobs, which serviced them)
 * @fault_own_spans: spans the handler bound whose pages all lie in this
 *                   device's memory
 * @fault_own_ns: nanoseconds it spent on them (walk and bind)
 * @fault_dma_spans: spans with pages in system RAM (mapped by DMA), none
 *                   in a peer's memory
 * @fault_dma_ns: nanoseconds it spent on them
 * @fault_p2p_spans: spans with pages in a peer's memory (mapped over P2P)
 * @fault_p2p_ns: nanoseconds it spent on them
 * @pt_tlb_hits: lookups of entries by this device's jobs running from their
 *               VM's table that found the entry in the device's TLB (a
 *               small cache of the translations it used last, per VM;
 *               since ABI version 16)
 * @pt_tlb_misses: lookups that walked the table instead
 * @pt_tlb_invalidations: invalidations of the device's TLB: one per zap of
 *                        a range that removed entries (an invalidation of
 *                        the process's page tables, SET_ATTR, a shrink
 *                        pass, closing the VM, an unbind), and one per
 *                        entry written over a live one
 * @evict_refaults: 2 MiB blocks of processes that jobs brought back into
 *                  this device within its size of their eviction (no more
 *                  of its blocks evicted in between than it has), whose
 *                  pages were placed active (Documentation/placement.rst)
 * @reserved: zero
 */
struct drm_msvm_stats {
	__u64 to_device;
	__u64 to_system;
	__u64 cpu_faults;
	__u64 evicted;
	__u64 resident;
	__u64 no_vram;
	__u64 chunks_live;
	__u64 chunks_created;
	__u64 vram_size;
	__u64 chunk_size;
	__u64 engine_vram_read;
	__u64 engine_vram_written;
	__u64 engine_sys_read;
	__u64 engine_sys_written;
	__u64 engine_p2p_read;
	__u64 engine_p2p_written;
	__u64 from_peer;
	__u64 chunks_cached;
	__u64 memmap_bytes;
	__u64 chunks_destroyed;
	__u64 shrink_scans;
	__u64 shrink_freed;
	__u64 shrink_moved;
	__u64 shrink_home;
	__u64 peer_read[MSVM_MAX_DEVICES];
	__u64 peer_written[MSVM_MAX_DEVICES];
	__u64 large_to_device;
	__u64 large_to_system;
	__u64 large_fallback;
	__u64 phase_steps[MSVM_SIZE_CLASSES];
	__u64 phase_collect_us[MSVM_SIZE_CLASSES];
	__u64 phase_alloc_us[MSVM_SIZE_CLASSES];
	__u64 phase_copy_us[MSVM_SIZE_CLASSES];
	__u64 phase_install_us[MSVM_SIZE_CLASSES];
	__u64 job_count;
	__u64 job_place_us;
	__u64 job_walk_us;
	__u64 job_bind_us;
	__u64 job_exec_us;
	__u64 evict_blocks;
	__u64 evict_pages;
	__u64 evict_demoted;
	__u64 thrash_detected;
	__u64 thrash_pinned;
	__u64 thrash_unpinned;
	__u64 thrash_avoided;
	__u64 access_counted;
	__u64 access_due;
	__u64 access_moved;
	__u64 replica_copied;
	__u64 replica_hits;
	__u64 replica_blocks;
	__u64 replica_dropped;
	__u64 cgroup_bytes;
	__u64 cgroup_limited;
	__u64 pt_hits;
	__u64 pt_faults;
	__u64 pt_bound;
	__u64 pt_invalidations;
	__u64 pt_zapped;
	__u64 pt_zap_ns;
	__u64 pt_bytes;
	__u64 pt_replays;
	__u64 fault_raised;
	__u64 fault_batches;
	__u64 fault_spans;
	__u64 fault_pages;
	__u64 fault_ns;
	__u64 fault_full;
	__u64 fault_own_spans;
	__u64 fault_own_ns;
	__u64 fault_dma_spans;
	__u64 fault_dma_ns;
	__u64 fault_p2p_spans;
	__u64 fault_p2p_ns;
	__u64 pt_tlb_hits;
	__u64 pt_tlb_misses;
	__u64 pt_tlb_invalidations;
	__u64 evict_refaults;
	__u64 reserved[1];
};

/* drm_msvm_exec.op */
#define MSVM_EXEC_FILL 1
#define MSVM_EXEC_COPY 2
#define MSVM_EXEC_ATOMIC_ADD 3
#define MSVM_EXEC_CHECKSUM 4

/* drm_msvm_exec.flags */
/* Use pages where they are (in place: system RAM by DMA, a peer of the
 * owner group over P2P) instead of migrating them here first; but 2 MiB
 * blocks this device keeps using so are moved here when the access
 * counters say so (since ABI version 11; not for ranges whose attributes
 * say "in place", prefer a place other than this device, or turn the
 * counters off: MSVM_ATTR_ACCESS_OFF; see Documentation/placement.rst). */
#define MSVM_EXEC_IN_PLACE (1u << 0)

/* drm_msvm_exec.pattern_size: the longest FILL pattern, in bytes (Level
 * Zero's zeCommandListAppendMemoryFill allows up to 128). */
#define MSVM_EXEC_PATTERN_MAX 128

/**
 * struct drm_msvm_exec - DRM_IOCTL_MSVM_EXEC
 *
 * Runs one job of the device's engine over [@addr, @addr + @length) of the
 * VM's process, synchronously. The engine reaches memory as a device does:
 * its own memory directly, system RAM by DMA, a peer's memory over P2P. By
 * default the range (and the source of a COPY) is first migrated to this
 * device, like a GPU page fault would (or as the range's attributes say:
 * DRM_IOCTL_MSVM_SET_ATTR); with MSVM_EXEC_IN_PLACE, pages are used where
 * they are, except blocks the access counters move here.
 *
 * MSVM_EXEC_FILL repeats a pattern over the range from @addr on (byte i of
 * the range is byte i % size of the pattern; the last repeat may be cut
 * short): the 8 bytes of @value in memory order when @pattern_size is
 * zero, else the @pattern_size bytes (1 to MSVM_EXEC_PATTERN_MAX) at user
 * address @src, read when the job is submitted (ABI version 17);
 * MSVM_EXEC_COPY copies [@src, @src + @length) over it (the two must not
 * overlap); MSVM_EXEC_ATOMIC_ADD adds @value to every 64-bit word of it;
 * MSVM_EXEC_CHECKSUM returns in @result the 64-bit FNV-1a hash of its bytes.
 * FILL, COPY and CHECKSUM work on any bytes (since ABI version 17; before,
 * as ATOMIC_ADD still does, @addr, @src and @length had to be multiples of
 * 8).
 *
 * Errors: -EINVAL: unknown @op or @flags, @length zero, @addr or @length
 * not a multiple of 8 for ATOMIC_ADD, a range wraps or the COPY ranges
 * overlap, @pattern_size above MSVM_EXEC_PATTERN_MAX or given for an
 * operation other than FILL, @src or @value given to an operation that
 * does not take it (@value with a @pattern_size), non-zero @pad or
 * @reserved; -EFAULT: part of a range is not mapped or is beyond the user
 * address space, or the pattern cannot be read (it is copied as the CPU
 * reads, before the VM is looked up: an unreadable pattern is -EFAULT
 * before -ENOENT, -EPERM or -ESRCH, and a pattern in device memory is
 * faulted home first);
 * -EACCES: part of a range lacks the access the job
 * needs (read; write for FILL, COPY's destination and ATOMIC_ADD);
 * -EFAULT also for memory no device may reach (memfd_secret() memory,
 * VM_IO/VM_PFNMAP mappings), as GUP refuses it; -ENOENT: no VM; -EPERM:
 * the VM belongs to another process; -ESRCH: it is exiting; -EINTR: the
 * caller was killed; -ENODEV: the device is going away.
 *
 * @op: in: MSVM_EXEC_*
 * @flags: in: MSVM_EXEC_IN_PLACE
 * @addr: in: start of the range (the destination of a COPY)
 * @length: in: bytes
 * @src: in: source of a COPY, user address of a FILL's pattern of
 *       @pattern_size bytes, else zero
 * @value: in: FILL's 8-byte pattern (without @pattern_size) or ATOMIC_ADD
 *         addend, else zero
 * @result: out: CHECKSUM result
 * @migrated: out: pages the job's placement pass moved (to this device, or
 *            to the preferred location the range's attributes name)
 * @pattern_size: in: bytes of a FILL's pattern at @src, 0 for @value's 8
 *                (ABI version 17; zero for other operations)
 * @pad: must be zero
 * @reserved: must be zero
 */
struct drm_msvm_exec {
	__u32 op;
	__u32 flags;
	__u64 addr;
	__u64 length;
	__u64 src;
	__u64 value;
	__u64 result;
	__u64 migrated;
	__u32 pattern_size;
	__u32 pad;
	__u64 reserved[1];
};

/* Locations: drm_msvm_set_attr.location, drm_msvm_prefetch.location. */
/* The accessing device: the one the ioctl is issued on (attributes only). */
#define MSVM_LOC_DEFAULT 0
/* System RAM. */
#define MSVM_LOC_SYSTEM 1
/* The msvm device whose index is in @device (MSVM_QUERY_SELF: this one). */
#define MSVM_LOC_DEVICE 2

/* drm_msvm_set_attr.access: how this device's jobs reach the range. */
/* As MSVM_ACCESS_MIGRATE. */
#define MSVM_ACCESS_DEFAULT 0
/* Move the pages to the preferred location first (like a GPU fault). */
#define MSVM_ACCESS_MIGRATE 1
/* Use pages where they are when this device reaches them (system RAM by
 * DMA, a peer of its owner group over P2P); others are faulted to system
 * RAM. */
#define MSVM_ACCESS_IN_PLACE 2

/* At most this many attribute ranges per VM (-ENOSPC beyond). */
#define MSVM_MAX_ATTR_RANGES 4096

/**
 * struct drm_msvm_set_attr - DRM_IOCTL_MSVM_SET_ATTR
 *
 * Sets the placement attributes of [@addr, @addr + @length) for the jobs
 * this device runs (DRM_IOCTL_MSVM_EXEC), replacing what the range had.
 * The attributes belong to the VM, by address: they outlive munmap and are
 * dropped with the VM. MSVM_LOC_DEFAULT with MSVM_ACCESS_DEFAULT resets the
 * range. When a job's range is MSVM_ACCESS_MIGRATE, its pages are first
 * moved to the preferred location: this device (default), system RAM, or a
 * peer of this device's owner group (the job then runs on them in place).
 * A preferred peer that has gone away means system RAM.
 *
 * Errors: -EINVAL: @addr or @length not 4 KiB aligned, @length zero, the
 * range wraps, unknown @location or @access, @device set with a location
 * other than MSVM_LOC_DEVICE, unknown @flags, non-zero @reserved; -EFAULT: the range
 * goes beyond the user address space; -ENOENT: no VM, or no device has
 * index @device; -ENOLINK: that device is not in this device's owner group
 * (the devices that all reach each other over P2P); -ENOSPC: the VM has
 * MSVM_MAX_ATTR_RANGES ranges; -EPERM: the VM belongs to another process;
 * -ESRCH: that process is exiting.
 *
 * @addr: in: start, page aligned
 * @length: in: bytes, page aligned, not zero
 * @location: in: preferred location, MSVM_LOC_*
 * @device: in: device index for MSVM_LOC_DEVICE (MSVM_QUERY_SELF: this
 *          device), else zero
 * @access: in: MSVM_ACCESS_*
 * @flags: in: MSVM_ATTR_THRASH_OFF, MSVM_ATTR_ACCESS_OFF,
 *         MSVM_ATTR_READ_MOSTLY, any of them or zero
 * @reserved: must be zero
 */
struct drm_msvm_set_attr {
	__u64 addr;
	__u64 length;
	__u32 location;
	__u32 device;
	__u32 access;
	__u32 flags;
	__u64 reserved[2];
};

/**
 * struct drm_msvm_prefetch - DRM_IOCTL_MSVM_PREFETCH
 *
 * Moves the pages of [@addr, @addr + @length) to a location: system RAM,
 * this device, or a peer of its owner group. Pages move straight
 * from device to device over P2P where the two reach each other, through
 * system RAM otherwise. Partial success is success, counted as for
 * DRM_IOCTL_MSVM_MIGRATE.
 *
 * Errors: those of DRM_IOCTL_MSVM_MIGRATE, and -EINVAL for an unknown
 * @location (MSVM_LOC_DEFAULT is not a place), -ENOENT when no device has
 * index @device, -ENOLINK when it is not in this device's owner group.
 *
 * @addr: in: start, page aligned
 * @length: in: bytes, page aligned, not zero
 * @location: in: MSVM_LOC_SYSTEM or MSVM_LOC_DEVICE
 * @device: in: device index for MSVM_LOC_DEVICE (MSVM_QUERY_SELF: this
 *          device), else zero
 * @flags: must be zero
 * @pad: must be zero
 * @moved: out: pages moved
 * @already: out: pages that were already there
 * @busy: out: pages the kernel would not move
 * @no_vram: out: pages not moved for lack of device memory, or because
 *           the caller's dmem cgroup is at its dmem.max for the device
 * @reserved: must be zero
 */
struct drm_msvm_prefetch {
	__u64 addr;
	__u64 length;
	__u32 location;
	__u32 device;
	__u32 flags;
	__u32 pad;
	__u64 moved;
	__u64 already;
	__u64 busy;
	__u64 no_vram;
	__u64 reserved[2];
};

/* drm_msvm_residency.attr_flags */
/* The range holds more than one set of attributes; those of its first
 * byte are reported. */
#define MSVM_ATTR_MIXED (1u << 0)
/* drm_msvm_set_attr.flags and drm_msvm_residency.attr_flags: thrashing
 * detection is off for the range (this device's jobs move its pages on
 * access every time, as before ABI version 10; see
 * Documentation/placement.rst). */
#define MSVM_ATTR_THRASH_OFF (1u << 1)
/* drm_msvm_set_attr.flags and drm_msvm_residency.attr_flags: the access
 * counters do not move the range's pages to this device when its jobs
 * that run in place keep using them (as before ABI version 11; see
 * Documentation/placement.rst). */
#define MSVM_ATTR_ACCESS_OFF (1u << 2)
/* drm_msvm_set_attr.flags and drm_msvm_residency.attr_flags: the range is
 * read-mostly (ABI version 12): this device's jobs move none of its pages;
 * a job that only reads it (CHECKSUM, or a COPY's source, all of the range
 * read-mostly; a COPY's source in the windows that lie in one 2 MiB block)
 * reads the system pages of private anonymous mappings without write
 * permission, not pinned for DMA, through read-only replicas in this
 * device's memory, made on first read and dropped by any change of the
 * pages' mappings (mprotect, munmap, a copy on write) before it happens;
 * other pages are used in place. A debugger's FOLL_FORCE write, which
 * changes no mapping, is not seen. See Documentation/placement.rst. */
#define MSVM_ATTR_READ_MOSTLY (1u << 3)

/**
 * struct drm_msvm_residency - DRM_IOCTL_MSVM_RESIDENCY
 *
 * Where the pages of [@addr, @addr + @length) live now (a snapshot: it
 * moves nothing and faults nothing in), and the attributes this VM has for
 * the range.
 *
 * Errors: as DRM_IOCTL_MSVM_MIGRATE, but unmapped holes are allowed (they
 * count as @none), and -EINVAL also for a range longer than 4 GiB.
 *
 * @addr: in: start, page aligned
 * @length: in: bytes, page aligned, not zero
 * @flags: must be zero
 * @attr_flags: out: MSVM_ATTR_*
 * @location: out: preferred location of the range's first byte
 * @device: out: its device index, for MSVM_LOC_DEVICE
 * @access: out: access policy of the range's first byte
 * @pad: must be zero
 * @system: out: bytes in system RAM
 * @none: out: bytes with no page (never touched, swapped out, unmapped)
 * @devices: out: bytes in each msvm device's memory, by device index
 * @pinned: out: bytes of the range in 2 MiB blocks that thrashing
 *          detection pins now (jobs use them where they are)
 * @replicas: out: bytes of the range with a read-only replica that is not
 *            stale, in each msvm device's memory, by device index (ABI
 *            version 12)
 * @reserved: must be zero
 */
struct drm_msvm_residency {
	__u64 addr;
	__u64 length;
	__u32 flags;
	__u32 attr_flags;
	__u32 location;
	__u32 device;
	__u32 access;
	__u32 pad;
	__u64 system;
	__u64 none;
	__u64 devices[MSVM_MAX_DEVICES];
	__u64 pinned;
	__u64 replicas[MSVM_MAX_DEVICES];
	__u64 reserved[1];
};

#define DRM_MSVM_QUERY 0x00
#define DRM_MSVM_VM_CREATE 0x01
#define DRM_MSVM_VM_DESTROY 0x02
#define DRM_MSVM_MIGRATE 0x03
#define DRM_MSVM_STATS 0x04
#define DRM_MSVM_EXEC 0x05
#define DRM_MSVM_SET_ATTR 0x06
#define DRM_MSVM_PREFETCH 0x07
#define DRM_MSVM_RESIDENCY 0x08

#define DRM_IOCTL_MSVM_QUERY \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_MSVM_QUERY, struct drm_msvm_query)
#define DRM_IOCTL_MSVM_VM_CREATE \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_MSVM_VM_CREATE, struct drm_msvm_vm_create)
#define DRM_IOCTL_MSVM_VM_DESTROY \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_MSVM_VM_DESTROY, struct drm_msvm_vm_destroy)
#define DRM_IOCTL_MSVM_MIGRATE \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_MSVM_MIGRATE, struct drm_msvm_migrate)
#define DRM_IOCTL_MSVM_STATS \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_MSVM_STATS, struct drm_msvm_stats)
#define DRM_IOCTL_MSVM_EXEC \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_MSVM_EXEC, struct drm_msvm_exec)
#define DRM_IOCTL_MSVM_SET_ATTR \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_MSVM_SET_ATTR, struct drm_msvm_set_attr)
#define DRM_IOCTL_MSVM_PREFETCH \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_MSVM_PREFETCH, struct drm_msvm_prefetch)
#define DRM_IOCTL_MSVM_RESIDENCY \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_MSVM_RESIDENCY, struct drm_msvm_residency)

#if defined(__cplusplus)
}
#endif

#endif /* _UAPI_MSVM_DRM_H_ */
