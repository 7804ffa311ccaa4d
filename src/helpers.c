// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers of msvm: wrappers for static-inline kernel functions and macros.
 * Declared in include/msvm_helpers.h and reached from Rust through
 * src/mm/bindings.rs; each is a one-line forward with the same contract as
 * the function it wraps.
 */
#include <linux/highmem.h>
#include <linux/io.h>
#include <linux/ioport.h>
#include <linux/memremap.h>
#include <linux/mm.h>
#include <linux/pagemap.h>
#include <linux/pci.h>
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

struct page *msvm_alloc_page_vma(struct vm_area_struct *vma, unsigned long addr)
{
	return alloc_page_vma(GFP_HIGHUSER_MOVABLE, vma, addr);
}

struct page *msvm_alloc_page_nofail(void)
{
	return alloc_page(GFP_HIGHUSER_MOVABLE | __GFP_NOFAIL);
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

void msvm_copy_page_to_io(void __iomem *dst, struct page *src)
{
	void *s = kmap_local_page(src);

	memcpy_toio(dst, s, PAGE_SIZE);
	kunmap_local(s);
}

void msvm_copy_io_to_page(struct page *dst, const void __iomem *src)
{
	void *d = kmap_local_page(dst);

	memcpy_fromio(d, src, PAGE_SIZE);
	kunmap_local(d);
}

void msvm_clear_io_page(void __iomem *dst)
{
	memset_io(dst, 0, PAGE_SIZE);
}
