// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers of msvm: where system pages come from, and the NUMA nodes
 * they are taken on (declared in include/msvm_helpers.h, called from
 * src/mm/page.rs, numa.rs and backing.rs). They stay in C for the NUMA
 * policy of a VMA or task (which decides where pages coming home go, see
 * msvm_home_by_policy()), the THP macros (thp_migration_supported(),
 * HPAGE_PMD_*), GFP flag macros, and allocation macros that tag their
 * call site for memory allocation profiling (alloc_hooks()), which only a
 * C call site gets. Built into msvm.ko (Kbuild) and msvm_dmirror.ko
 * (dmirror/helpers.c).
 */
#include <linux/mm.h>
#include <linux/gfp.h>
#include <linux/mempolicy.h>
#include <linux/sched.h>
#include <linux/topology.h>

#include "msvm_helpers.h"

/*
 * The order of the device folios msvm migrates whole: PMD-sized, if the
 * kernel migrates THPs whole; 0 otherwise.
 */
unsigned int msvm_large_order(void)
{
	return thp_migration_supported() ? HPAGE_PMD_ORDER : 0;
}

/*
 * Where a page of @vma coming home from a device goes is decided by a NUMA
 * policy: the VMA's own (mbind(); a get_policy operation, which every shmem
 * VMA has, shared policy or not), or the task's (set_mempolicy()) if the
 * task is a thread of the VMA's mm: a CPU fault, a MIGRATE, or room made
 * among the process's own pages by its own request. Another task's policy
 * (an eviction for another process, kswapd, an unplug) does not decide
 * where a process's pages go, with one exception: a VMA with a get_policy
 * operation but no shared policy (a private mapping of a shmem file) falls
 * back, in vma_alloc_folio(), to the current task's policy; msvm cannot
 * look the shared policy up itself (__mpol_put() is exported to KVM only).
 */
static bool msvm_home_by_policy(struct vm_area_struct *vma)
{
#ifdef CONFIG_NUMA
	return vma->vm_policy || (vma->vm_ops && vma->vm_ops->get_policy) ||
	       (current->mempolicy && current->mm == vma->vm_mm);
#else
	return false;
#endif
}

/* @nid if it names an online node, else NUMA_NO_NODE. */
int msvm_node_checked(int nid)
{
	if (nid < 0 || nid >= MAX_NUMNODES || !node_online(nid))
		return NUMA_NO_NODE;
	return nid;
}

/* @nid, or the local node if @nid is NUMA_NO_NODE or not online. */
static int msvm_home_nid(int nid)
{
	nid = msvm_node_checked(nid);
	return nid == NUMA_NO_NODE ? numa_mem_id() : nid;
}

static struct page *msvm_folio_page(struct folio *folio)
{
	return folio ? &folio->page : NULL;
}

/*
 * A page (or a PMD-sized folio, for the MSVM_HOME_LARGE kinds) for data
 * coming home from a device, of kind @how (include/msvm_helpers.h); for
 * @addr of @vma if @vma is not NULL. A NUMA policy decides its node
 * (msvm_home_by_policy()), else it is taken on @nid (NUMA_NO_NODE: the
 * local node, the faulting or calling CPU's), falling back to the nearest
 * nodes as any allocation does. NULL if none could be had (never for
 * MSVM_HOME_MUST), or for a large kind if the kernel does not migrate THPs
 * whole.
 */
struct page *msvm_alloc_home(struct vm_area_struct *vma, unsigned long addr, int nid,
			     unsigned int how)
{
	unsigned int order = 0;
	struct folio *folio;
	gfp_t gfp;

	switch (how) {
	case MSVM_HOME_MIGRATE:
		gfp = GFP_HIGHUSER_MOVABLE;
		break;
	case MSVM_HOME_MUST:
		gfp = GFP_HIGHUSER_MOVABLE | __GFP_NOFAIL;
		break;
	case MSVM_HOME_TRY:
		gfp = (GFP_HIGHUSER_MOVABLE & ~__GFP_DIRECT_RECLAIM) | __GFP_NOWARN;
		break;
	case MSVM_HOME_KEPT:
		gfp = GFP_HIGHUSER | __GFP_NOFAIL;
		break;
	case MSVM_HOME_LARGE:
		gfp = GFP_HIGHUSER_MOVABLE | __GFP_NORETRY | __GFP_NOWARN;
		order = msvm_large_order();
		break;
	default:
		return NULL;
	}
	if (how == MSVM_HOME_LARGE && !order)
		return NULL;
	nid = msvm_home_nid(nid);
	if (vma && msvm_home_by_policy(vma)) {
		addr = ALIGN_DOWN(addr, PAGE_SIZE << order);
		if (!(gfp & __GFP_NOFAIL))
			return msvm_folio_page(vma_alloc_folio(gfp, order, vma, addr));
		/*
		 * Data with nowhere else to go (a device going away): where the
		 * policy says if memory comes there without the OOM killer,
		 * else on @nid or wherever the allocator finds it. An unplug
		 * must finish, even with a bound node full.
		 */
		folio = vma_alloc_folio((gfp & ~__GFP_NOFAIL) | __GFP_RETRY_MAYFAIL | __GFP_NOWARN,
					order, vma, addr);
		if (folio)
			return &folio->page;
	} else if (order) {
		/*
		 * As the kernel's own THP allocations (alloc_pages_mpol()):
		 * @nid alone first, compacting but not retrying, then any
		 * node, so that a fragmented node's neighbour is taken only
		 * when compaction did not help.
		 */
		folio = __folio_alloc_node((gfp & ~__GFP_RETRY_MAYFAIL) | __GFP_THISNODE |
					   __GFP_NORETRY, order, nid);
		if (folio || !(gfp & __GFP_DIRECT_RECLAIM))
			return msvm_folio_page(folio);
	}
	return msvm_folio_page(__folio_alloc_node(gfp, order, nid));
}

/*
 * Up to @nr movable user pages for migrations into @vma, in one pass of
 * the page allocator's bulk path on @nid (as msvm_alloc_home()), into
 * @pages (cleared to NULL first); returns how many. 0 if a NUMA policy
 * decides (msvm_home_by_policy(): the bulk path knows one node, and
 * alloc_pages_bulk_mempolicy(), which follows a task's policy but not a
 * VMA's, is not exported): the caller then takes each page with
 * msvm_alloc_home(), which follows the policy at its address.
 */
unsigned int msvm_alloc_pages_bulk_vma(struct vm_area_struct *vma, int nid, unsigned int nr,
				       struct page **pages)
{
	unsigned int i;

	if (msvm_home_by_policy(vma))
		return 0;
	for (i = 0; i < nr; i++)
		pages[i] = NULL;
	return alloc_pages_bulk_node(GFP_HIGHUSER_MOVABLE, msvm_home_nid(nid), nr, pages);
}

/* The node of @page (numa.rs's KUnit test). */
int msvm_page_nid(struct page *page)
{
	return page_to_nid(page);
}

/*
 * The NUMA node of @dev: NUMA_NO_NODE if the firmware gave none, or one
 * that is not online (memremap_pages() indexes NODE_DATA() with it).
 */
int msvm_dev_node(struct device *dev)
{
	return msvm_node_checked(dev_to_node(dev));
}

/* Whether node @nid has memory (numa.rs's KUnit test). */
bool msvm_node_has_memory(int nid)
{
	return msvm_node_checked(nid) != NUMA_NO_NODE && node_state(nid, N_MEMORY);
}

/*
 * A zeroed folio of @order (0, or the PMD order if the kernel migrates THPs
 * whole), or NULL, without retrying or warning: for the copy floor, which
 * fails with -ENOMEM rather than push other memory out hard. Not movable:
 * it is held (locked) for the whole run.
 */
struct page *msvm_alloc_zeroed_try(unsigned int order)
{
	struct folio *folio;

	if (order && (!thp_migration_supported() || order != HPAGE_PMD_ORDER))
		return NULL;
	folio = folio_alloc(GFP_HIGHUSER | __GFP_ZERO | __GFP_NORETRY | __GFP_NOWARN, order);
	return folio ? &folio->page : NULL;
}

/*
 * 1 << order pages for a backing block (src/mm/backing.rs), in the direct
 * map and not compound, so that split_page() can part them. A large block
 * is not worth a hard reclaim (its user falls back to single pages).
 */
struct page *msvm_alloc_block(unsigned int order, bool zeroed)
{
	gfp_t gfp = GFP_KERNEL | __GFP_NOWARN;

	if (order)
		gfp |= __GFP_NORETRY;
	if (zeroed)
		gfp |= __GFP_ZERO;
	return alloc_pages(gfp, order);
}
