// SPDX-License-Identifier: GPL-2.0
/*
 * msvm's workaround for Linux 7.3's zap_huge_pmd() bug: it takes a PMD
 * *migration* entry of a device-private folio for a device-private entry,
 * so unmapping one (munmap, MADV_DONTNEED, the OOM reaper, an exit) drops a
 * folio reference and a mapping the entry never held, and the folio is
 * freed under the migration. The fix upstream is one line in
 * mm/huge_memory.c (test the entry, not the folio):
 * Documentation/upstream/zap_huge_pmd.patch, with its report and
 * reproducer in Documentation/upstream/zap_huge_pmd.rst.
 *
 * Until every kernel msvm supports has the fix, a 2 MiB device folio is
 * collected whole (which turns its PMDs into migration entries) only when
 * it is mapped once, by an mm whose mmap lock is held for writing with the
 * VMA write-locked (no zap of that mm can run meanwhile); a PMD fault on
 * one trades the fault's lock for that write lock first. These are the C
 * pieces of that (src/mm/mmap.rs, src/mm/fault.rs and src/mm/migrate.rs
 * are the Rust side).
 * With the fix, whole-folio steps could run under the mmap read lock and
 * this file could go.
 */
#include <linux/hmm.h>
#include <linux/leafops.h>
#include <linux/migrate.h>
#include <linux/mm.h>
#include <linux/mmap_lock.h>
#include <linux/pagemap.h>
#include <linux/sched/mm.h>

#include "msvm_helpers.h"

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
