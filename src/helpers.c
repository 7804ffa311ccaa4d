// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers of msvm: forwards of static-inline kernel functions and macros,
 * which bindgen cannot turn into callable symbols, each with the contract
 * of what it wraps. Declared in include/msvm_helpers.h and reached from
 * Rust through src/mm/bindings.rs (only src/mm/ calls them). Exported
 * functions are called from Rust directly (dma_map_page_attrs,
 * request_free_mem_region, shrinker_alloc, ...), and so are the static
 * inlines the kernel's own Rust helpers cover (kmap_local_page,
 * atomic64_add, release_mem_region, resource_size).
 *
 * The few functions that are more than a forward stay in C for these
 * reasons:
 *  - the page allocations (msvm_alloc_*, msvm_large_order): in
 *    src/helpers_alloc.c, with why.
 *  - msvm_folio_split_tail: it sets folio fields (pgmap, mapping) that sit
 *    in unions of struct folio and struct page, which Rust would write
 *    through bindgen's anonymous unions.
 *  - msvm_copy_page_to_io, msvm_copy_io_to_page: loops of raw 64-bit I/O
 *    accessors, which are inline asm (from Rust, one out-of-line call per
 *    word), then wmb() or the KMSAN unpoisoning of what the device gave.
 *  - msvm_page_read, msvm_page_write (and the system-page side of the two
 *    copies above): copies in and out of pages that user space and other
 *    devices' engines may access at the same time. Under the kernel's
 *    memory model such a racing memcpy is what every copy of a user page
 *    is; in Rust a plain copy racing with a write is undefined behaviour,
 *    and Rust has no racy memcpy (kernel::page's read_raw()/write_raw()
 *    make their callers rule races out, which msvm cannot). The atomic add
 *    to such a page is race-free, so it is Rust (src/mm/dma.rs).
 *  - msvm_copy_highpage: copy_highpage() (test_hmm's copy, which the copy
 *    floor times), refused for ZONE_DEVICE pages, whose struct page may
 *    have no memory behind it; a racy copy, as above.
 *  - msvm_page_maybe_dma_pinned: folio_maybe_dma_pinned() is an inline.
 *  - msvm_pci_enable_mem_managed: pci_enable_device_mem() paired with a
 *    device-managed pci_disable_device() (devm_add_action_or_reset() is a
 *    macro), so that a failed probe or an unbind balances the device's
 *    enable count (kernel::pci's enable_device_mem() is not managed).
 *  - msvm_pci_add_dynid: adds a dynamic id with no driver data (what
 *    probes as a generic device) to msvm's PCI driver unless its id table
 *    lists the id (-EEXIST, as new_id does), the driver found by name on
 *    the PCI bus. The bus iterator keeps the driver from being unregistered
 *    while the callback runs (bus_remove_driver waits for it), which
 *    driver_find() does not; and the sysfs new_id file refuses driver data
 *    that is no id-table entry's, which for a Rust driver is a kernel
 *    pointer.
 *  - msvm_vma_is_secretmem, msvm_page_is_secretmem: vma_is_secretmem() is
 *    not exported, and the test is a chain of raw field reads (vm_file,
 *    f_inode, i_sb, s_magic; for a page, the folio's mapping, in a union,
 *    read once under RCU and tested for the FOLIO_MAPPING_FLAGS tag bits
 *    before it is followed to its host inode), shorter and clearer in C.
 *  - msvm_dmem_*: the dmem cgroup controller's API is static inlines
 *    without CONFIG_CGROUP_DMEM (msvm builds with or without it), and its
 *    region registration takes a printf-style name.
 *
 * The helpers of KUnit cases are in src/helpers_kunit.c; the workaround
 * for Linux 7.3's zap_huge_pmd() bug is in src/zap_huge_pmd.c; the trace
 * events are in src/trace.c.
 */
#include <linux/cgroup_dmem.h>
#include <linux/dma-mapping.h>
#include <linux/highmem.h>
#include <linux/hmm.h>
#include <linux/mmu_notifier.h>
#include <linux/mmap_lock.h>
#include <linux/oom.h>
#include <linux/userfaultfd_k.h>
#include <linux/io.h>
#include <linux/leafops.h>
#include <linux/kmsan-checks.h>
#include <linux/memremap.h>
#include <linux/migrate.h>
#include <linux/mm.h>
#include <linux/pagemap.h>
#include <linux/pci.h>
#include <linux/workqueue.h>
#include <linux/topology.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/swiotlb.h>
#include <linux/fs.h>
#include <linux/mutex.h>
#include <linux/module.h>
#include <uapi/linux/magic.h>
#include <drm/drm_drv.h>
#include <drm/drm_file.h>
#include <drm/drm_print.h>

#include "msvm_helpers.h"

struct dev_pagemap *msvm_page_pgmap(struct page *page)
{
	return page_pgmap(page);
}

unsigned long msvm_page_to_pfn(struct page *page)
{
	return page_to_pfn(page);
}

struct page *msvm_pfn_to_page(unsigned long pfn)
{
	return pfn_to_page(pfn);
}

/*
 * Whether @page's folio may be mapped by more than one mm
 * (folio_maybe_mapped_shared(): exact for small folios; for large ones,
 * with CONFIG_MM_ID, it may say so falsely once more than two mms mapped
 * the folio; always without). The caller keeps the page mapped.
 */
bool msvm_page_maybe_mapped_shared(struct page *page)
{
	return folio_maybe_mapped_shared(page_folio(page));
}

bool msvm_is_device_private_page(struct page *page)
{
	return is_device_private_page(page);
}

unsigned int msvm_page_folio_order(struct page *page)
{
	return folio_order(page_folio(page));
}

/*
 * zone_device_folio_init() for the folio that starts at @page, which may
 * still look like a tail of a larger folio it was part of before: it
 * becomes the head (as zone_device_page_init() treats every page).
 */
void msvm_zone_device_folio_init(struct page *page, struct dev_pagemap *pgmap, unsigned int order)
{
	zone_device_folio_init((struct folio *)page, pgmap, order);
}

/*
 * What the core does for a new folio of a split device-private folio when
 * the pagemap has no folio_split callback (zone_device_private_split_cb()):
 * msvm has one, to keep its allocator's books, so it does this itself.
 */
void msvm_folio_split_tail(struct folio *head, struct folio *tail)
{
	tail->pgmap = head->pgmap;
	folio_page(tail, 0)->mapping = folio_page(head, 0)->mapping;
}

struct page *msvm_folio_head(struct page *page)
{
	return &page_folio(page)->page;
}

void msvm_mmap_write_downgrade(struct mm_struct *mm)
{
	mmap_write_downgrade(mm);
}

int msvm_mmap_write_lock_killable(struct mm_struct *mm)
{
	return mmap_write_lock_killable(mm);
}

/*
 * mmap_write_lock() if no one holds the lock (7.3 has no mmap_write_trylock):
 * the same steps, the rwsem only tried.
 */
bool msvm_mmap_write_trylock(struct mm_struct *mm)
{
	__mmap_lock_trace_start_locking(mm, true);
	if (!down_write_trylock(&mm->mmap_lock)) {
		__mmap_lock_trace_acquire_returned(mm, true, false);
		return false;
	}
	mm_lock_seqcount_begin(mm);
	__mmap_lock_trace_acquire_returned(mm, true, true);
	return true;
}

void msvm_mmap_write_unlock(struct mm_struct *mm)
{
	mmap_write_unlock(mm);
}

void msvm_mmap_read_lock(struct mm_struct *mm)
{
	mmap_read_lock(mm);
}

bool msvm_mmap_read_trylock(struct mm_struct *mm)
{
	return mmap_read_trylock(mm);
}

void msvm_mmap_read_unlock(struct mm_struct *mm)
{
	mmap_read_unlock(mm);
}

struct vm_area_struct *msvm_vma_lookup(struct mm_struct *mm, unsigned long addr)
{
	mmap_assert_locked(mm);
	return vma_lookup(mm, addr);
}

/*
 * Whether @mm still has users (a process, or an mmget()): a hint, read
 * with no lock; 0 stays 0 (an mm whose users are gone is being torn down).
 */
bool msvm_mm_has_users(struct mm_struct *mm)
{
	return atomic_read(&mm->mm_users) > 0;
}

/*
 * The mm of the process @nr (in the caller's pid namespace), with a user
 * reference (get_task_mm()): ERR_PTR(-ESRCH) if there is no such process,
 * ERR_PTR(-EINVAL) if it has no mm (a kernel thread, or exiting).
 */
struct mm_struct *msvm_mm_of_pid(int nr)
{
	struct pid *pid = find_get_pid(nr);
	struct task_struct *task;
	struct mm_struct *mm;

	if (!pid)
		return ERR_PTR(-ESRCH);
	task = get_pid_task(pid, PIDTYPE_PID);
	put_pid(pid);
	if (!task)
		return ERR_PTR(-ESRCH);
	mm = get_task_mm(task);
	put_task_struct(task);
	return mm ? mm : ERR_PTR(-EINVAL);
}

void msvm_lock_page(struct page *page)
{
	lock_page(page);
}

void msvm_put_page(struct page *page)
{
	put_page(page);
}

/*
 * Page copies to and from the BAR in 64-bit I/O accesses: both ends are
 * page aligned, so no byte or word tails. (x86's memcpy_toio/memcpy_fromio
 * move 32 bits at a time with rep movsl.)
 */
void msvm_copy_page_to_io(void __iomem *dst, struct page *src)
{
	const u64 *s = kmap_local_page(src);
	u64 __iomem *d = dst;
	unsigned int i;

	for (i = 0; i < PAGE_SIZE / sizeof(u64); i++)
		__raw_writeq(s[i], d + i);
	/* Drain the write-combining buffers before the page is handed over. */
	wmb();
	kunmap_local(s);
}

void msvm_copy_io_to_page(struct page *dst, const void __iomem *src)
{
	u64 *d = kmap_local_page(dst);
	const u64 __iomem *s = src;
	unsigned int i;

	for (i = 0; i < PAGE_SIZE / sizeof(u64); i++)
		d[i] = __raw_readq(s + i);
	/* As memcpy_fromio(): values read from a device are initialised. */
	kmsan_unpoison_memory(d, PAGE_SIZE);
	kunmap_local(d);
}

/*
 * copy_highpage() between two system RAM pages; -EINVAL for a ZONE_DEVICE
 * page (a device-private page has no memory behind its struct page).
 */
int msvm_copy_highpage(struct page *dst, struct page *src)
{
	if (is_zone_device_page(dst) || is_zone_device_page(src))
		return -EINVAL;
	copy_highpage(dst, src);
	return 0;
}

bool msvm_mmu_interval_read_retry(struct mmu_interval_notifier *sub, unsigned long seq)
{
	return mmu_interval_read_retry(sub, seq);
}

void msvm_mmu_interval_set_seq(struct mmu_interval_notifier *sub, unsigned long seq)
{
	mmu_interval_set_seq(sub, seq);
}

bool msvm_mmu_notifier_range_blockable(const struct mmu_notifier_range *range)
{
	return mmu_notifier_range_blockable(range);
}

int msvm_mirror_insert_killable(struct mmu_notifier *mn, struct mmu_interval_notifier *sub,
				struct mm_struct *mm, unsigned long start, unsigned long length,
				const struct mmu_interval_notifier_ops *ops)
{
	int ret = mmap_write_lock_killable(mm);

	if (ret)
		return ret;
	ret = __mmu_notifier_register(mn, mm);
	if (!ret) {
		ret = mmu_interval_notifier_insert_locked(sub, mm, start, length, ops);
		if (ret) {
			mmap_write_unlock(mm);
			mmu_notifier_unregister(mn, mm);
			return ret;
		}
	}
	mmap_write_unlock(mm);
	return ret;
}

unsigned long msvm_mmu_interval_seq(struct mmu_interval_notifier *sub)
{
	/* Pairs with the WRITE_ONCE in mmu_interval_set_seq(). */
	return READ_ONCE(sub->invalidate_seq);
}

int msvm_hmm_range_fault_killable(struct hmm_range *range)
{
	struct mm_struct *mm = range->notifier->mm;
	struct vm_area_struct *vma;
	VMA_ITERATOR(vmi, mm, range->start);
	int ret;

	ret = mmap_read_lock_killable(mm);
	if (ret)
		return ret;
	if (check_stable_address_space(mm)) {
		ret = -EFAULT;
		goto out;
	}
	if (range->default_flags & HMM_PFN_REQ_FAULT) {
		for_each_vma_range(vmi, vma, range->end) {
			if (userfaultfd_armed(vma)) {
				ret = -EXDEV;
				goto out;
			}
		}
	}
	ret = hmm_range_fault(range);
out:
	mmap_read_unlock(mm);
	return ret;
}

int msvm_dma_mapping_error(struct device *dev, dma_addr_t addr)
{
	return dma_mapping_error(dev, addr);
}

bool msvm_dma_force_bounce(struct device *dev)
{
	return is_swiotlb_force_bounce(dev);
}

void msvm_page_written(struct page *page)
{
	struct folio *folio = page_folio(page);

	/*
	 * A swap-backed page (anonymous, shmem) may be mapped writable and
	 * clean (MADV_FREE cleans an anonymous one and keeps it writable; a
	 * shared shmem mapping has no write-notify, so a read fault maps it
	 * writable and clean): what a device wrote through a DMA mapping must
	 * not be dropped as clean. Their dirty hooks only set the flag
	 * (noop_dirty_folio), so no folio lock is needed; the page is mapped
	 * (the caller's walk is valid), so it is not being truncated. File
	 * systems that account dirty pages write-protect clean ones, so the
	 * write fault already dirtied them.
	 */
	if (folio_test_anon(folio) || folio_test_swapbacked(folio))
		folio_mark_dirty(folio);
}

void msvm_page_read(struct page *page, unsigned int off, void *buf, unsigned int len)
{
	void *p = kmap_local_page(page);

	memcpy(buf, p + off, len);
	kunmap_local(p);
}

void msvm_page_write(struct page *page, unsigned int off, const void *buf, unsigned int len)
{
	void *p = kmap_local_page(page);

	memcpy(p + off, buf, len);
	kunmap_local(p);
}

struct workqueue_struct *msvm_alloc_reclaim_wq(const char *name, int max_active)
{
	return alloc_workqueue("%s", WQ_MEM_RECLAIM | WQ_UNBOUND, max_active, name);
}

/*
 * Whether @inode is on secretmem's pseudo file system (memfd_secret()):
 * its pages are not in the kernel's direct map, so the kernel must never
 * read or write them (vma_is_secretmem() is not exported to modules).
 */
static bool msvm_inode_is_secretmem(struct inode *inode)
{
	return inode && inode->i_sb->s_magic == SECRETMEM_MAGIC;
}

bool msvm_vma_is_secretmem(struct vm_area_struct *vma)
{
	return vma->vm_file && msvm_inode_is_secretmem(file_inode(vma->vm_file));
}

/*
 * Whether @page (any valid system page) is a secretmem page. Its mapping
 * may be truncated away meanwhile: an inode (with the address_space in it)
 * is freed after an RCU grace period, and secretmem's superblock lives for
 * good, so the mapping read once is safe to follow under RCU.
 */
bool msvm_page_is_secretmem(struct page *page)
{
	struct folio *folio = page_folio(page);
	struct address_space *mapping;
	bool secret = false;

	rcu_read_lock();
	mapping = READ_ONCE(folio->mapping);
	if (mapping && !((unsigned long)mapping & FOLIO_MAPPING_FLAGS))
		secret = msvm_inode_is_secretmem(mapping->host);
	rcu_read_unlock();
	return secret;
}

/*
 * Whether @page's folio may be pinned for DMA (FOLL_PIN: io_uring fixed
 * buffers, RDMA, vfio, O_DIRECT): a writer the page tables do not show.
 * folio_maybe_dma_pinned() is an inline.
 */
bool msvm_page_maybe_dma_pinned(struct page *page)
{
	return folio_maybe_dma_pinned(page_folio(page));
}

/* Whether @page belongs to an anonymous folio: the only memory msvm moves. */
bool msvm_page_is_anon(struct page *page)
{
	return folio_test_anon(page_folio(page));
}

/* Whether @pfn is the zero page's (is_zero_pfn() is an inline). */
bool msvm_is_zero_pfn(unsigned long pfn)
{
	return is_zero_pfn(pfn);
}

unsigned int msvm_memalloc_noreclaim_save(void)
{
	return memalloc_noreclaim_save();
}

void msvm_memalloc_noreclaim_restore(unsigned int flags)
{
	memalloc_noreclaim_restore(flags);
}

bool msvm_fatal_signal_pending(void)
{
	return fatal_signal_pending(current);
}

void msvm_cond_resched(void)
{
	cond_resched();
}

bool msvm_drm_dev_unplugged(struct drm_device *dev)
{
	return drm_dev_is_unplugged(dev);
}

int msvm_mutex_lock_killable(struct mutex *lock)
{
	return mutex_lock_killable(lock);
}

/*
 * The dmem cgroup controller: forwards, because without
 * CONFIG_CGROUP_DMEM the API is static inlines (register gives NULL, a
 * charge succeeds with a NULL pool); the printf-style name of
 * dmem_cgroup_register_region() is given as one string.
 */
struct dmem_cgroup_region *msvm_dmem_register(u64 size, const char *name)
{
	struct dmem_cgroup_init init = { .size = size };

	return dmem_cgroup_register_region(&init, "%s", name);
}

void msvm_dmem_unregister(struct dmem_cgroup_region *region)
{
	dmem_cgroup_unregister_region(region);
}

int msvm_dmem_try_charge(struct dmem_cgroup_region *region, u64 size,
			 struct dmem_cgroup_pool_state **pool,
			 struct dmem_cgroup_pool_state **limit_pool)
{
	return dmem_cgroup_try_charge(region, size, pool, limit_pool);
}

void msvm_dmem_uncharge(struct dmem_cgroup_pool_state *pool, u64 size)
{
	dmem_cgroup_uncharge(pool, size);
}

void msvm_dmem_pool_put(struct dmem_cgroup_pool_state *pool)
{
	dmem_cgroup_pool_state_put(pool);
}

bool msvm_dmem_evict_valuable(struct dmem_cgroup_pool_state *limit_pool,
			      struct dmem_cgroup_pool_state *test_pool,
			      bool ignore_low, bool *hit_low)
{
	return dmem_cgroup_state_evict_valuable(limit_pool, test_pool, ignore_low, hit_low);
}

/*
 * DRM client statistics (fdinfo) for msvm's render nodes. Linux 7.3's Rust
 * DRM abstraction builds the drm_driver (show_fdinfo NULL) and its
 * file_operations (no show_fdinfo) as constants, so a Rust driver cannot
 * add fdinfo. msvm_drm_add_fdinfo() points a device not yet registered at
 * a copy of both with the two filled in: drm_show_fdinfo() as the file's
 * show_fdinfo, which prints the DRM core's lines (drm-driver,
 * drm-client-id, drm-pdev) and then calls @show. The copy is made from the
 * first device's constants, with the first @show, and serves every device
 * of the same driver (any other is refused: -EINVAL); it lives as long as the module,
 * as the constants do (an open file holds the module through fops->owner).
 */
static struct drm_driver msvm_fdinfo_driver;
static struct file_operations msvm_fdinfo_fops;
static const struct drm_driver *msvm_fdinfo_orig;
static DEFINE_MUTEX(msvm_fdinfo_lock);

int msvm_drm_add_fdinfo(struct drm_device *drm,
			void (*show)(struct drm_printer *p, struct drm_file *f))
{
	int ret = 0;

	mutex_lock(&msvm_fdinfo_lock);
	if (!msvm_fdinfo_orig) {
		msvm_fdinfo_fops = *drm->driver->fops;
		msvm_fdinfo_fops.show_fdinfo = drm_show_fdinfo;
		msvm_fdinfo_driver = *drm->driver;
		msvm_fdinfo_driver.fops = &msvm_fdinfo_fops;
		msvm_fdinfo_driver.show_fdinfo = show;
		msvm_fdinfo_orig = drm->driver;
	}
	if (drm->driver == msvm_fdinfo_orig)
		drm->driver = &msvm_fdinfo_driver;
	else
		ret = -EINVAL;
	mutex_unlock(&msvm_fdinfo_lock);
	return ret;
}

void msvm_fdinfo_size(struct drm_printer *p, const char *stat, const char *region, u64 bytes)
{
	drm_fdinfo_print_size(p, "drm", stat, region, bytes);
}

void msvm_fdinfo_engine(struct drm_printer *p, const char *engine, u64 ns)
{
	drm_printf(p, "drm-engine-%s:\t%llu ns\n", engine, ns);
}
