// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers of msvm: wrappers for static-inline kernel functions and macros.
 * Declared in include/msvm_helpers.h and reached from Rust through
 * src/mm/bindings.rs; each is a one-line forward with the same contract as
 * the function it wraps.
 */
#include <linux/dma-mapping.h>
#include <linux/highmem.h>
#include <linux/hmm.h>
#include <linux/mmu_notifier.h>
#include <linux/mmap_lock.h>
#include <linux/io.h>
#include <linux/leafops.h>
#include <linux/kmsan-checks.h>
#include <linux/ioport.h>
#include <linux/memremap.h>
#include <linux/migrate.h>
#include <linux/mm.h>
#include <linux/pagemap.h>
#include <linux/pci.h>
#include <linux/shrinker.h>
#include <linux/workqueue.h>
#include <linux/topology.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/fs.h>
#include <linux/mutex.h>
#include <uapi/linux/magic.h>
#include <drm/drm_drv.h>

#include "msvm_helpers.h"

int msvm_pci_domain_nr(struct pci_dev *pdev)
{
	return pci_domain_nr(pdev->bus);
}

struct resource *msvm_request_devmem(unsigned long size, const char *name)
{
	struct resource *res = request_free_mem_region(&iomem_resource, size, name);

	return IS_ERR(res) ? NULL : res;
}

void msvm_release_devmem(struct resource *res)
{
	release_mem_region(res->start, resource_size(res));
}

int msvm_numa_node_id(void)
{
	return numa_node_id();
}

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

void *msvm_page_zone_device_data(struct page *page)
{
	return page->zone_device_data;
}

void msvm_page_set_zone_device_data(struct page *page, void *data)
{
	page->zone_device_data = data;
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

/*
 * The order of the device folios msvm migrates whole: PMD-sized, if the
 * kernel migrates THPs whole; 0 otherwise.
 */
unsigned int msvm_large_order(void)
{
	return thp_migration_supported() ? HPAGE_PMD_ORDER : 0;
}

/*
 * The device-private folio that the PMD of @vma at @addr maps whole, and in
 * *@mapcount its number of mappings; NULL (and 0) if the PMD maps none. The
 * caller holds the mmap lock; the folio is valid only as long as something
 * keeps that PMD from changing (a compare of pointers is all it is good
 * for otherwise).
 */
static struct folio *msvm_pmd_device_folio(struct vm_area_struct *vma, unsigned long addr,
					   int *mapcount)
{
	struct mm_struct *mm = vma->vm_mm;
	struct folio *folio = NULL;
	spinlock_t *ptl;
	pgd_t *pgd;
	p4d_t *p4d;
	pud_t *pud;
	pmd_t *pmd, pmdval;

	*mapcount = 0;
	mmap_assert_locked(mm);
	pgd = pgd_offset(mm, addr);
	if (pgd_none(pgdp_get(pgd)))
		return NULL;
	p4d = p4d_offset(pgd, addr);
	if (p4d_none(p4dp_get(p4d)))
		return NULL;
	pud = pud_offset(p4d, addr);
	if (!pud_present(pudp_get(pud)) || pud_leaf(pudp_get(pud)))
		return NULL;
	pmd = pmd_offset(pud, addr);
	ptl = pmd_lock(mm, pmd);
	pmdval = pmdp_get(pmd);
	if (!pmd_present(pmdval) && pmd_is_device_private_entry(pmdval)) {
		folio = softleaf_to_folio(softleaf_from_pmd(pmdval));
		*mapcount = folio_mapcount(folio);
	}
	spin_unlock(ptl);
	return folio;
}

/*
 * How many mappings the device-private folio that the PMD of @vma at @addr
 * maps whole has (0: the PMD maps no device-private folio whole). The
 * caller holds the mmap lock, so no fork of this mm can add a mapping
 * meanwhile.
 *
 * Linux 7.3's zap_huge_pmd() takes a PMD *migration* entry of a
 * device-private folio for a device-private entry: unmapping it (munmap,
 * MADV_DONTNEED, the OOM reaper, an exit) drops a folio reference and a
 * mapping the entry never held, and the folio is freed under the
 * migration. msvm collects such a folio whole (which turns every PMD that
 * maps it into a migration entry) only when it is mapped once, by an mm
 * whose mmap lock it holds for writing (see migrate.rs).
 */
int msvm_pmd_device_folio_mapcount(struct vm_area_struct *vma, unsigned long addr)
{
	int mapcount = 0;

	msvm_pmd_device_folio(vma, addr, &mapcount);
	return mapcount;
}

/*
 * From migrate_to_ram() of a PMD fault on the device-private folio mapped
 * whole at @addr (PMD aligned) of @vma, whose head page @head the fault
 * path holds locked and referenced, with @vma's mm's mmap lock held for
 * writing and the VMA write-locked (msvm_fault_relock_exclusive()): splits
 * the folio into small folios, and every mm's PMD of it into page-table
 * entries, moving nothing (if the core cannot split it now, the retried
 * fault tries again). Either way the head page's folio is locked and
 * referenced again on return, as the fault path expects.
 *
 * The core splits a folio only for a caller holding the single extra
 * reference it allows: a migration's collect takes one, so the fault's own
 * is dropped meanwhile. That is safe only because nothing can unmap the
 * folio from this mm meanwhile (the write locks), and this mm's mapping
 * holds a reference. The split goes through page-table entries
 * (TTU_SPLIT_HUGE_PMD), never a PMD migration entry (see
 * msvm_pmd_device_folio_mapcount()). The collected head page moves nowhere
 * (no destination): finalize puts it back.
 */
void msvm_split_fault_folio(struct vm_area_struct *vma, unsigned long addr,
			    struct page *head, void *owner)
{
	unsigned long src = 0, dst = 0;
	struct migrate_vma args = {
		.vma = vma,
		.start = addr,
		.end = addr + PAGE_SIZE,
		.src = &src,
		.dst = &dst,
		.pgmap_owner = owner,
		.flags = MIGRATE_VMA_SELECT_DEVICE_PRIVATE,
		.fault_page = head,
	};

	int mapcount;

	mmap_assert_write_locked(vma->vm_mm);
	/*
	 * The PMD may have changed while the fault waited for the write lock:
	 * only the fault's own folio, which this mm still maps (so its mapping
	 * holds a reference), may lose the fault's reference.
	 */
	if (msvm_pmd_device_folio(vma, addr, &mapcount) != page_folio(head))
		return;
	folio_put(page_folio(head));
	if (!migrate_vma_setup(&args))
		migrate_vma_finalize(&args);
	folio_get(page_folio(head));
}

/*
 * For migrate_to_ram() of a PMD fault: lets go of the fault's lock and
 * takes @vmf's mm's mmap lock for writing instead (killable), with a user
 * reference on the mm, which *@mmp receives. The fault must then return
 * VM_FAULT_RETRY (unless it takes the read lock back:
 * msvm_mmap_write_downgrade()): its lock is gone, and so may be its VMA.
 *
 * The fault path holds the faulting folio locked and referenced. It must
 * not sleep for the mmap lock so: a task holding the mmap lock may be
 * retrying a trylock of that folio in a loop (GUP and hmm_range_fault
 * retry a device-private fault whose folio is locked without letting go of
 * the lock). So the folio is unlocked while this waits (the fault's
 * reference keeps it from being freed, split or migrated), and locked
 * again before it returns, whatever it returns.
 *
 * Returns 0 on success; -EAGAIN if the fault may not wait (RETRY_NOWAIT:
 * its lock is kept, it returns VM_FAULT_RETRY with it held, as filemap's
 * folio_lock_or_retry() does, and is made again later);
 * -EOPNOTSUPP if the fault may not drop its lock at all (no
 * FAULT_FLAG_ALLOW_RETRY), or its mm has no users left to keep (its lock
 * is kept); -EINTR if a fatal signal came
 * while waiting, -EBUSY if someone else held the folio meanwhile (both:
 * the fault's lock is gone, VM_FAULT_RETRY).
 */
int msvm_fault_relock_exclusive(struct vm_fault *vmf, struct mm_struct **mmp)
{
	struct mm_struct *mm = vmf->vma->vm_mm;
	struct folio *folio = page_folio(vmf->page);

	if (!(vmf->flags & FAULT_FLAG_ALLOW_RETRY))
		return -EOPNOTSUPP;
	if (vmf->flags & FAULT_FLAG_RETRY_NOWAIT)
		return -EAGAIN;
	/* The faulting context keeps users on the mm; this one outlives it. */
	if (!mmget_not_zero(mm))
		return -EOPNOTSUPP;
	release_fault_lock(vmf);
	folio_unlock(folio);
	if (mmap_write_lock_killable(mm)) {
		folio_lock(folio);
		mmput(mm);
		return -EINTR;
	}
	if (!folio_trylock(folio)) {
		mmap_write_unlock(mm);
		folio_lock(folio);
		mmput(mm);
		return -EBUSY;
	}
	*mmp = mm;
	return 0;
}

void msvm_mmap_write_downgrade(struct mm_struct *mm)
{
	mmap_write_downgrade(mm);
}

int msvm_mmap_write_lock_killable(struct mm_struct *mm)
{
	return mmap_write_lock_killable(mm);
}

void msvm_mmap_write_unlock(struct mm_struct *mm)
{
	mmap_write_unlock(mm);
}

/*
 * The VMA of @mm at @addr, write-locked (vma_start_write()) so that
 * nothing that takes the VMA lock alone (page faults, MADV_DONTNEED) runs
 * in it until the mmap lock is let go; NULL if none. The caller holds the
 * mmap lock for writing.
 */
struct vm_area_struct *msvm_vma_lookup_exclusive(struct mm_struct *mm, unsigned long addr)
{
	struct vm_area_struct *vma;

	mmap_assert_write_locked(mm);
	vma = vma_lookup(mm, addr);
	if (vma)
		vma_start_write(vma);
	return vma;
}

void msvm_mmput(struct mm_struct *mm)
{
	mmput(mm);
}

struct page *msvm_alloc_page_vma(struct vm_area_struct *vma, unsigned long addr)
{
	return alloc_page_vma(GFP_HIGHUSER_MOVABLE, vma, addr);
}

struct page *msvm_alloc_page_nofail(void)
{
	return alloc_page(GFP_HIGHUSER_MOVABLE | __GFP_NOFAIL);
}

/*
 * A PMD-sized folio for a migration to system RAM, or NULL: the caller then
 * moves the range in small pages. No retrying, no warning: the fallback is
 * cheap.
 */
struct page *msvm_alloc_large_vma(struct vm_area_struct *vma, unsigned long addr)
{
	struct folio *folio;

	if (!thp_migration_supported())
		return NULL;
	folio = vma_alloc_folio(GFP_HIGHUSER_MOVABLE | __GFP_NORETRY | __GFP_NOWARN,
				HPAGE_PMD_ORDER, vma, ALIGN_DOWN(addr, HPAGE_PMD_SIZE));
	return folio ? &folio->page : NULL;
}

/*
 * A PMD-sized folio for the eviction of a 2 MiB device folio (which the core
 * cannot split in migrate_device_pages()): reclaim and compact hard, but
 * fail rather than loop forever; the caller retries.
 */
struct page *msvm_alloc_large_evict(void)
{
	struct folio *folio;

	if (!thp_migration_supported())
		return NULL;
	folio = folio_alloc(GFP_HIGHUSER_MOVABLE | __GFP_RETRY_MAYFAIL | __GFP_NOWARN,
			    HPAGE_PMD_ORDER);
	return folio ? &folio->page : NULL;
}

void msvm_lock_page(struct page *page)
{
	lock_page(page);
}

void msvm_unlock_page(struct page *page)
{
	unlock_page(page);
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

void msvm_clear_io_page(void __iomem *dst)
{
	memset_io(dst, 0, PAGE_SIZE);
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

unsigned long msvm_hmm_pfn_valid(void)
{
	return HMM_PFN_VALID;
}

unsigned long msvm_hmm_pfn_write(void)
{
	return HMM_PFN_WRITE;
}

unsigned long msvm_hmm_pfn_error(void)
{
	return HMM_PFN_ERROR;
}

unsigned long msvm_hmm_pfn_flags(void)
{
	return HMM_PFN_FLAGS;
}

/*
 * A DMA mapping of @page for @dev, for the emulated device: it reaches the
 * page itself through the kernel's mapping (its address decoder resolves a
 * DMA address to the page it maps, as an IOMMU walk would), never a bounce
 * buffer behind the address. So no CPU sync is due at unmap: there, with
 * bounce buffers (swiotlb=force, SEV/TDX guests), the copy back would write
 * the stale bounce buffer over what the device wrote into the page.
 * (swiotlb still copies the page into the bounce buffer at map, whatever
 * the attribute says; nothing reads that copy.)
 */
u64 msvm_dma_map_page(struct device *dev, struct page *page)
{
	dma_addr_t addr = dma_map_page_attrs(dev, page, 0, PAGE_SIZE, DMA_BIDIRECTIONAL,
					     DMA_ATTR_SKIP_CPU_SYNC);

	return dma_mapping_error(dev, addr) ? 0 : addr;
}

void msvm_dma_unmap_page(struct device *dev, u64 addr)
{
	dma_unmap_page_attrs(dev, addr, PAGE_SIZE, DMA_BIDIRECTIONAL, DMA_ATTR_SKIP_CPU_SYNC);
}

u64 msvm_dma_map_resource(struct device *dev, u64 phys)
{
	dma_addr_t addr = dma_map_resource(dev, phys, PAGE_SIZE, DMA_BIDIRECTIONAL, 0);

	return dma_mapping_error(dev, addr) ? 0 : addr;
}

void msvm_dma_unmap_resource(struct device *dev, u64 addr)
{
	dma_unmap_resource(dev, addr, PAGE_SIZE, DMA_BIDIRECTIONAL, 0);
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

void msvm_page_add_u64(struct page *page, unsigned int off, u64 value)
{
	void *p = kmap_local_page(page);

	atomic64_add(value, (atomic64_t *)(p + off));
	kunmap_local(p);
}

struct shrinker *msvm_shrinker_alloc(const char *name)
{
	return shrinker_alloc(0, "%s", name);
}

struct workqueue_struct *msvm_alloc_reclaim_wq(const char *name)
{
	return alloc_workqueue("%s", WQ_MEM_RECLAIM | WQ_UNBOUND, 1, name);
}

unsigned long msvm_page_struct_size(void)
{
	return sizeof(struct page);
}

bool msvm_gfp_allows_blocking(gfp_t gfp)
{
	return gfpflags_allow_blocking(gfp);
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

/* Whether @page belongs to an anonymous folio: the only memory msvm moves. */
bool msvm_page_is_anon(struct page *page)
{
	return folio_test_anon(page_folio(page));
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
