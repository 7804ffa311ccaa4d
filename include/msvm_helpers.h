/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers of msvm: src/helpers.c (forwards of static-inline kernel
 * functions and macros that bindgen cannot turn into callable symbols, and
 * the few pieces that need C, each listed there with why),
 * src/helpers_alloc.c (page allocations), src/helpers_kunit.c (for KUnit
 * cases) and src/zap_huge_pmd.c (the workaround for Linux 7.3's
 * zap_huge_pmd() bug, at the end). Only src/mm/ calls them.
 */
#ifndef _MSVM_HELPERS_H_
#define _MSVM_HELPERS_H_

#include <linux/dma-mapping.h>
#include <linux/hmm.h>
#include <linux/migrate.h>
#include <linux/mmu_notifier.h>
#include <linux/mm.h>
#include <linux/pci.h>
#include <linux/workqueue.h>

int msvm_pci_domain_nr(struct pci_dev *pdev);
unsigned long msvm_pci_bar_flags(struct pci_dev *pdev, int bar);
int msvm_pci_add_dynid(const char *name, unsigned int vendor, unsigned int device);
int msvm_pci_enable_mem_managed(struct pci_dev *pdev);

/* msvm_pci_p2p_why(): why pci_p2pdma routes a pair's P2P as it does. */
/* The two devices meet at an upstream bridge below the host bridge. */
#define MSVM_P2P_WHY_COMMON_BRIDGE (1u << 0)
/* A port on the path between them has ACS redirect on. */
#define MSVM_P2P_WHY_ACS_REDIRECT (1u << 1)
/* @client is no PCI device. */
#define MSVM_P2P_WHY_NOT_PCI (1u << 2)
unsigned int msvm_pci_p2p_why(struct pci_dev *provider, struct device *client);
u64 msvm_pci_dev_key(struct device *dev);
u64 msvm_pci_bar_bus_offset(struct pci_dev *pdev, int bar);

/* The dmem cgroup controller (static inlines without CONFIG_CGROUP_DMEM). */
struct dmem_cgroup_region;
struct dmem_cgroup_pool_state;
struct dmem_cgroup_region *msvm_dmem_register(u64 size, const char *name);
void msvm_dmem_unregister(struct dmem_cgroup_region *region);
int msvm_dmem_try_charge(struct dmem_cgroup_region *region, u64 size,
			 struct dmem_cgroup_pool_state **pool,
			 struct dmem_cgroup_pool_state **limit_pool);
void msvm_dmem_uncharge(struct dmem_cgroup_pool_state *pool, u64 size);
void msvm_dmem_pool_put(struct dmem_cgroup_pool_state *pool);
bool msvm_dmem_evict_valuable(struct dmem_cgroup_pool_state *limit_pool,
			      struct dmem_cgroup_pool_state *test_pool,
			      bool ignore_low, bool *hit_low);

/* The source selection of migrate_vma (an anonymous enum in migrate.h). */
enum msvm_migrate_select {
	MSVM_SELECT_SYSTEM = MIGRATE_VMA_SELECT_SYSTEM,
	MSVM_SELECT_DEVICE_PRIVATE = MIGRATE_VMA_SELECT_DEVICE_PRIVATE,
	MSVM_SELECT_COMPOUND = MIGRATE_VMA_SELECT_COMPOUND,
};

/* Device-private memory. */
struct dev_pagemap *msvm_page_pgmap(struct page *page);
unsigned long msvm_page_to_pfn(struct page *page);
struct page *msvm_pfn_to_page(unsigned long pfn);
bool msvm_is_device_private_page(struct page *page);
bool msvm_page_maybe_mapped_shared(struct page *page);
unsigned int msvm_page_folio_order(struct page *page);
struct page *msvm_folio_head(struct page *page);
void msvm_zone_device_folio_init(struct page *page, struct dev_pagemap *pgmap, unsigned int order);
void msvm_folio_split_tail(struct folio *head, struct folio *tail);
unsigned int msvm_large_order(void);

/* System pages. */
/* Kinds of msvm_alloc_home(). */
/* A page for a migration into a VMA: may reclaim, may fail. */
#define MSVM_HOME_MIGRATE 0
/* A page for data that has nowhere else to go: waits for memory. */
#define MSVM_HOME_MUST 1
/* A page if one is free right now: no reclaim, no warning, not zeroed. */
#define MSVM_HOME_TRY 2
/* A PMD-sized folio if one is free: no retrying, no warning. */
#define MSVM_HOME_LARGE 3
/* A page msvm keeps (not movable, off the LRU): waits for memory. */
#define MSVM_HOME_KEPT 4
struct page *msvm_alloc_home(struct vm_area_struct *vma, unsigned long addr, int nid,
			     unsigned int how);
unsigned int msvm_alloc_pages_bulk_vma(struct vm_area_struct *vma, int nid, unsigned int nr,
				       struct page **pages);
struct page *msvm_alloc_zeroed_try(unsigned int order);
struct page *msvm_alloc_block(unsigned int order, bool zeroed);
int msvm_dev_node(struct device *dev);
int msvm_node_checked(int nid);
bool msvm_node_has_memory(int nid);
int msvm_page_nid(struct page *page);
void msvm_lock_page(struct page *page);
void msvm_put_page(struct page *page);

/* Copies between a system page and I/O memory (a VRAM page through the BAR). */
void msvm_copy_page_to_io(void __iomem *dst, struct page *src);
void msvm_copy_io_to_page(struct page *dst, const void __iomem *src);
/* A system page's copy to another, as the reference driver test_hmm copies. */
int msvm_copy_highpage(struct page *dst, struct page *src);

/* Page-table mirroring. */
bool msvm_mmu_interval_read_retry(struct mmu_interval_notifier *sub, unsigned long seq);
void msvm_mmu_interval_set_seq(struct mmu_interval_notifier *sub, unsigned long seq);
bool msvm_mmu_notifier_range_blockable(const struct mmu_notifier_range *range);
/*
 * Registers @mn (a classic notifier) and inserts @sub for [start, start +
 * length) of @mm, both under the mmap write lock taken killably (-EINTR; the
 * registration's mm_take_all_locks() also stops for a signal that is not
 * fatal, with -EINTR); @mn is unregistered again if the insertion fails.
 */
int msvm_mirror_insert_killable(struct mmu_notifier *mn, struct mmu_interval_notifier *sub,
				struct mm_struct *mm, unsigned long start, unsigned long length,
				const struct mmu_interval_notifier_ops *ops);
/* A notifier's sequence now, without waiting for an invalidation in flight. */
unsigned long msvm_mmu_interval_seq(struct mmu_interval_notifier *sub);
/*
 * hmm_range_fault() under the mmap read lock taken killably, for a range
 * whose notifier_seq the caller set; -EXDEV, walking nothing, for a range that
 * faults pages in where a VMA has userfaultfd armed (its faults must be able
 * to let go of the lock: hmm_range_fault_unlocked_timeout()).
 */
int msvm_hmm_range_fault_killable(struct hmm_range *range);

/* The mmap lock for writing: what excludes every zap of an mm's page tables. */
int msvm_mmap_write_lock_killable(struct mm_struct *mm);
bool msvm_mmap_write_trylock(struct mm_struct *mm);
void msvm_mmap_write_downgrade(struct mm_struct *mm);
void msvm_mmap_write_unlock(struct mm_struct *mm);
void msvm_mmap_read_lock(struct mm_struct *mm);
bool msvm_mmap_read_trylock(struct mm_struct *mm);
void msvm_mmap_read_unlock(struct mm_struct *mm);
struct vm_area_struct *msvm_vma_lookup(struct mm_struct *mm, unsigned long addr);
struct mm_struct *msvm_mm_of_pid(int nr);
bool msvm_mm_has_users(struct mm_struct *mm);

/* For KUnit cases (src/helpers_kunit.c). */
unsigned long msvm_kunit_mmap(unsigned long len);
struct mm_struct *msvm_kunit_mm_alloc(void);
struct device *msvm_kunit_device(void);
void msvm_kunit_device_unregister(struct device *dev);
bool msvm_pfn_valid(unsigned long pfn);


/* DMA mappings of system pages for a device. */
int msvm_dma_mapping_error(struct device *dev, dma_addr_t addr);
bool msvm_dma_force_bounce(struct device *dev);
void msvm_page_written(struct page *page);

/* CPU access to system pages (the engine's address decoder). */
void msvm_page_read(struct page *page, unsigned int off, void *buf, unsigned int len);
void msvm_page_write(struct page *page, unsigned int off, const void *buf, unsigned int len);

/* Reclaim: a workqueue that may run during reclaim. */
struct workqueue_struct *msvm_alloc_reclaim_wq(const char *name, int max_active);
unsigned int msvm_memalloc_noreclaim_save(void);
void msvm_memalloc_noreclaim_restore(unsigned int flags);

/* What the kernel must not touch, and what msvm moves. */
bool msvm_vma_is_secretmem(struct vm_area_struct *vma);
bool msvm_page_is_secretmem(struct page *page);
bool msvm_page_is_anon(struct page *page);
bool msvm_page_maybe_dma_pinned(struct page *page);
bool msvm_is_zero_pfn(unsigned long pfn);

/* Long operations: fatal signals, rescheduling, a device going away. */
struct drm_device;
bool msvm_fatal_signal_pending(void);
void msvm_cond_resched(void);
bool msvm_drm_dev_unplugged(struct drm_device *dev);
struct drm_printer;
struct drm_file;
int msvm_drm_add_fdinfo(struct drm_device *drm,
			void (*show)(struct drm_printer *p, struct drm_file *f));
void msvm_fdinfo_size(struct drm_printer *p, const char *stat, const char *region, u64 bytes);
void msvm_fdinfo_engine(struct drm_printer *p, const char *engine, u64 ns);
int msvm_mutex_lock_killable(struct mutex *lock);

/* src/trace.c: msvm's trace events (include/msvm_trace.h). */
void msvm_trace_migrate(int dev, bool to_device, u64 start, u64 end, u64 moved, u64 already,
			u64 busy, u64 no_vram, u64 folios, int result);
void msvm_trace_cpu_fault(int dev, u64 addr, u64 pages, u64 folios);
void msvm_trace_evict(int dev, int reason, u64 offset, u64 pages);
void msvm_trace_shrink(int dev, u64 chunks, u64 moved, u64 home, u64 memmap_freed);
void msvm_trace_exec(int dev, u32 op, u64 addr, u64 len, u64 vram, u64 p2p, u64 dma,
		     u64 migrated, int result);
void msvm_trace_pagemap(int dev, bool create, u32 chunk, u64 bytes);
void msvm_trace_pt_fault(int dev, u64 addr, u64 pages, u64 bound, int result);
void msvm_trace_pt_invalidate(int dev, u64 start, u64 end, u64 zapped, u64 ns);
void msvm_trace_fault_batch(int dev, u64 faults, u64 spans, u64 pages, u64 bound, u64 ns);

/*
 * src/zap_huge_pmd.c: what keeps zaps away from 2 MiB device folios moved
 * whole (Linux 7.3's zap_huge_pmd() bug).
 */
int msvm_pmd_device_folio_mapcount(struct vm_area_struct *vma, unsigned long addr);
void msvm_split_fault_folio(struct vm_area_struct *vma, unsigned long addr,
			    struct page *head, void *owner);
int msvm_fault_relock_exclusive(struct vm_fault *vmf, struct mm_struct **mmp);
struct vm_area_struct *msvm_vma_lookup_exclusive(struct mm_struct *mm, unsigned long addr);

#endif /* _MSVM_HELPERS_H_ */
