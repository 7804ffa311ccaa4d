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
 * Whether the PMD of @vma at @addr maps a device-private folio whole that
 * another mm (a fork relative) maps too. The caller holds the mmap lock
 * (read), so no fork of this mm can add a mapping meanwhile: a folio found
 * mapped once stays so until the caller lets go of the lock.
 *
 * Linux 7.3's zap_huge_pmd() takes a PMD *migration* entry of a
 * device-private folio for a device-private entry: unmapping or exiting
 * drops a folio reference and a mapping it never held. A migration that
 * collects such a folio whole turns the other mm's PMD into a migration
 * entry (try_to_migrate()) until it finishes, so that mm exiting then frees
 * the folio under the migration. msvm does not move shared device folios
 * whole (see migrate.rs, large_step()).
 */
bool msvm_pmd_device_folio_shared(struct vm_area_struct *vma, unsigned long addr)
{
	struct mm_struct *mm = vma->vm_mm;
	bool shared = false;
	spinlock_t *ptl;
	pgd_t *pgd;
	p4d_t *p4d;
	pud_t *pud;
	pmd_t *pmd, pmdval;

	mmap_assert_locked(mm);
	pgd = pgd_offset(mm, addr);
	if (pgd_none(pgdp_get(pgd)))
		return false;
	p4d = p4d_offset(pgd, addr);
	if (p4d_none(p4dp_get(p4d)))
		return false;
	pud = pud_offset(p4d, addr);
	if (!pud_present(pudp_get(pud)) || pud_leaf(pudp_get(pud)))
		return false;
	pmd = pmd_offset(pud, addr);
	ptl = pmd_lock(mm, pmd);
	pmdval = pmdp_get(pmd);
	if (!pmd_present(pmdval) && pmd_is_device_private_entry(pmdval))
		shared = folio_mapcount(softleaf_to_folio(softleaf_from_pmd(pmdval))) > 1;
	spin_unlock(ptl);
	return shared;
}

/*
 * From migrate_to_ram() of a PMD fault on the device-private folio mapped
 * whole at @addr (PMD aligned) of @vma, whose head page @head the fault
 * path holds locked and referenced (and the mmap lock): splits the folio
 * into small folios, and every mm's PMD of it into page-table entries,
 * moving nothing (if the core cannot split it now, the fault is simply
 * retried). Either way the head page's folio is locked and referenced again
 * on return, as the fault path expects.
 *
 * The core splits a folio only for a caller holding the single extra
 * reference it allows: a migration's collect takes one, so the fault's own
 * is dropped meanwhile (this mm's mapping, which the mmap lock keeps, holds
 * the folio). The split goes through page-table entries (TTU_SPLIT_HUGE_PMD),
 * never a PMD migration entry: see msvm_pmd_device_folio_shared() for why
 * other mms must not get one. The collected head page moves nowhere (no
 * destination): finalize puts it back.
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

	mmap_assert_locked(vma->vm_mm);
	folio_put(page_folio(head));
	if (!migrate_vma_setup(&args))
		migrate_vma_finalize(&args);
	folio_get(page_folio(head));
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

void msvm_mmap_read_lock(struct mm_struct *mm)
{
	mmap_read_lock(mm);
}

void msvm_mmap_read_unlock(struct mm_struct *mm)
{
	mmap_read_unlock(mm);
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

u64 msvm_dma_map_page(struct device *dev, struct page *page)
{
	dma_addr_t addr = dma_map_page(dev, page, 0, PAGE_SIZE, DMA_BIDIRECTIONAL);

	return dma_mapping_error(dev, addr) ? 0 : addr;
}

void msvm_dma_unmap_page(struct device *dev, u64 addr)
{
	dma_unmap_page(dev, addr, PAGE_SIZE, DMA_BIDIRECTIONAL);
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
