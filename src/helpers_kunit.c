// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers of msvm's KUnit cases: memory of a process for a case's
 * kthread, mms of no task (src/mm/kunit_mm.rs), a device of KUnit's bus
 * that maps for DMA, and whether a frame is RAM (src/mm/kunit_dev.rs).
 * Built into msvm.ko (Kbuild) and msvm_dmirror.ko (dmirror/helpers.c),
 * declared in include/msvm_helpers.h; without KUnit built in, each fails
 * as it says.
 */
#include <linux/mm.h>
#include <linux/mman.h>
#include <linux/module.h>
#include <linux/sched/mm.h>
#include <kunit/test.h>

#include "msvm_helpers.h"

#if IS_BUILTIN(CONFIG_KUNIT)
MODULE_IMPORT_NS("EXPORTED_FOR_KUNIT_TESTING");
#endif

/*
 * For KUnit cases (src/mm/kunit_mm.rs): @len bytes of anonymous private
 * memory, readable and writable, mapped in the mm of the calling task,
 * which is given one first if it has none (a KUnit case's kthread:
 * kunit_attach_mm(), as kunit_vm_mmap() does). Returns the address, or a
 * negative errno cast as vm_mmap() returns one.
 */
unsigned long msvm_kunit_mmap(unsigned long len)
{
#if IS_BUILTIN(CONFIG_KUNIT)
	bool fresh = !current->mm;
	int ret = kunit_attach_mm();

	if (ret)
		return (unsigned long)ret;
	/*
	 * A fresh mm holds two references of the task's: mm_alloc()'s, which
	 * exit_mm()'s mmput() drops, and kthread_use_mm()'s mmgrab() for
	 * active_mm, which nothing drops: the kthread exits with the mm still
	 * in use (no kthread_unuse_mm()), and exit_mm() takes a lazy-TLB
	 * reference of its own, which the final context switch drops. As
	 * 7.3's kunit_attach_mm() stands, each case's mm_struct would leak
	 * (kmemleak does not see it): drop the extra one now, as a process
	 * holds its mm. Only while the count is the two just taken, which
	 * nothing else can hold yet: a kunit_attach_mm() that no longer leaks
	 * it leaves one, and nothing is dropped.
	 */
	if (fresh && atomic_read(&current->mm->mm_count) == 2)
		mmdrop(current->mm);
	return vm_mmap(NULL, 0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, 0);
#else
	return (unsigned long)-EINVAL;
#endif
}

/*
 * For KUnit cases (src/mm/kunit_mm.rs): a new mm of no task, one user
 * (mm_alloc(), exported for KUnit only), for cases that need many mms;
 * mmput() ends it. NULL without KUnit, or without memory.
 */
struct mm_struct *msvm_kunit_mm_alloc(void)
{
#if IS_BUILTIN(CONFIG_KUNIT)
	return mm_alloc();
#else
	return NULL;
#endif
}

/*
 * What the device's helpers below need, and the mm helpers above do not
 * (scripts/rust-mm-series.py gives each helper the includes above it:
 * make rust-mm's series carries the mm helpers, not these).
 */
#include <linux/dma-mapping.h>
#include <linux/err.h>
#include <kunit/device.h>
#include <kunit/test-bug.h>

/*
 * For KUnit cases (src/mm/kunit_dev.rs): a device of the running case on
 * KUnit's bus, bound to a driver of its own (kunit_device_register(),
 * under the module's name: msvm.ko and msvm_dmirror.ko both have cases),
 * with a 64-bit DMA mask, as a PCI device of msvm's has. No IOMMU stands
 * behind KUnit's bus: its mappings are dma-direct's. KUnit unregisters it
 * after the case, if msvm_kunit_device_unregister() has not.
 * ERR_PTR(-EINVAL) outside a KUnit case or without KUnit, else the error
 * of its registration or its mask.
 */
struct device *msvm_kunit_device(void)
{
#if IS_BUILTIN(CONFIG_KUNIT)
	struct kunit *test = kunit_get_current_test();
	struct device *dev;
	int ret;

	if (!test)
		return ERR_PTR(-EINVAL);
	dev = kunit_device_register(test, KBUILD_MODNAME "_kunit_dev");
	if (IS_ERR(dev))
		return dev;
	ret = dma_set_mask_and_coherent(dev, DMA_BIT_MASK(64));
	if (ret) {
		kunit_device_unregister(test, dev);
		return ERR_PTR(ret);
	}
	return dev;
#else
	return ERR_PTR(-EINVAL);
#endif
}

/* Unregisters @dev, a device msvm_kunit_device() made in the running case. */
void msvm_kunit_device_unregister(struct device *dev)
{
#if IS_BUILTIN(CONFIG_KUNIT)
	kunit_device_unregister(kunit_get_current_test(), dev);
#endif
}

/*
 * Whether page frame @pfn has a struct page (pfn_valid() is an inline):
 * RAM, or device memory the kernel made pages for. For KUnit cases that
 * map a made-up bus address for DMA (dma_map_resource() is for MMIO: the
 * DMA API's debugging reports RAM).
 */
bool msvm_pfn_valid(unsigned long pfn)
{
	return pfn_valid(pfn);
}
