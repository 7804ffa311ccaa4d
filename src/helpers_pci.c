// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers of msvm for PCI devices (see src/helpers.c for what a helper
 * is here): forwards of static-inline PCI functions, a device-managed
 * enable, dynamic ids, and why pci_p2pdma decides a pair's P2P path as it
 * does (msvm_pci_p2p_why). Declared in include/msvm_helpers.h, called
 * from src/mm/pci.rs only.
 */

#include <linux/device.h>
#include <linux/module.h>
#include <linux/pci.h>

#include "msvm_helpers.h"

int msvm_pci_domain_nr(struct pci_dev *pdev)
{
	return pci_domain_nr(pdev->bus);
}

unsigned long msvm_pci_bar_flags(struct pci_dev *pdev, int bar)
{
	return pci_resource_flags(pdev, bar);
}

static void msvm_pci_disable(void *pdev)
{
	pci_disable_device(pdev);
}

int msvm_pci_enable_mem_managed(struct pci_dev *pdev)
{
	int ret = pci_enable_device_mem(pdev);

	if (ret)
		return ret;
	return devm_add_action_or_reset(&pdev->dev, msvm_pci_disable, pdev);
}

struct msvm_dynid {
	const char *name;
	unsigned int vendor, device;
	int ret;
};

static int msvm_add_dynid_one(struct device_driver *drv, void *data)
{
	struct msvm_dynid *d = data;
	struct pci_driver *pdrv = to_pci_driver(drv);
	const struct pci_device_id *ids;

	if (drv->owner != THIS_MODULE || strcmp(drv->name, d->name))
		return 0;
	for (ids = pdrv->id_table; ids && (ids->vendor || ids->subvendor || ids->class_mask);
	     ids++) {
		if ((ids->vendor == PCI_ANY_ID || ids->vendor == d->vendor) &&
		    (ids->device == PCI_ANY_ID || ids->device == d->device)) {
			d->ret = -EEXIST;
			return 1;
		}
	}
	d->ret = pci_add_dynid(pdrv, d->vendor, d->device, PCI_ANY_ID, PCI_ANY_ID,
			       0, 0, 0);
	return 1;
}

int msvm_pci_add_dynid(const char *name, unsigned int vendor, unsigned int device)
{
	struct msvm_dynid d = { .name = name, .vendor = vendor, .device = device, .ret = -ENODEV };

	bus_for_each_drv(&pci_bus_type, NULL, &d, msvm_add_dynid_one);
	return d.ret;
}

/*
 * Whether ACS redirects requests at bridge (or function) @pdev: what
 * pci_p2pdma's calc_map_type_and_dist() asks of each port on a path
 * (drivers/pci/p2pdma.c, pci_bridge_has_acs_redir(), static there).
 */
static bool msvm_acs_redirects(struct pci_dev *pdev)
{
	u16 ctrl;

	if (!pdev->acs_cap)
		return false;
	pci_read_config_word(pdev, pdev->acs_cap + PCI_ACS_CTRL, &ctrl);
	return ctrl & (PCI_ACS_RR | PCI_ACS_CR | PCI_ACS_EC);
}

/*
 * Why pci_p2pdma routes P2P from @client to @provider's memory as it does:
 * MSVM_P2P_WHY_COMMON_BRIDGE if the two meet at an upstream bridge below
 * the host bridge (a switch's port), MSVM_P2P_WHY_ACS_REDIRECT if a port on
 * the way there (or on the whole way up, with no common bridge) has ACS
 * redirect on; MSVM_P2P_WHY_NOT_PCI alone if @client is no PCI device. The
 * walk is calc_map_type_and_dist()'s, in Linux 7.3, whose map type
 * (pci_p2pdma_map_type()) is not exported: with pci_p2pdma_distance_many(),
 * which is and says whether there is a path at all, it tells the path
 * pci_p2pdma gives the pair (inside the switch if the two meet at a common
 * bridge with no ACS redirect, else through the host bridge). Both devices
 * are held by the caller (so are their upstream bridges).
 */
unsigned int msvm_pci_p2p_why(struct pci_dev *provider, struct device *client_dev)
{
	struct pci_dev *a, *bb, *client;
	unsigned int why = 0;

	if (!dev_is_pci(client_dev))
		return MSVM_P2P_WHY_NOT_PCI;
	client = to_pci_dev(client_dev);
	for (a = provider; a; a = pci_upstream_bridge(a)) {
		if (msvm_acs_redirects(a))
			why |= MSVM_P2P_WHY_ACS_REDIRECT;
		for (bb = client; bb; bb = pci_upstream_bridge(bb))
			if (bb == a)
				goto common;
	}
	return why;
common:
	why |= MSVM_P2P_WHY_COMMON_BRIDGE;
	for (bb = client; bb && bb != a; bb = pci_upstream_bridge(bb))
		if (msvm_acs_redirects(bb))
			why |= MSVM_P2P_WHY_ACS_REDIRECT;
	return why;
}

/*
 * @dev's place on the PCI bus, as pci_p2pdma keys what it decides per
 * client (map_types_idx()): domain << 16 | bus << 8 | devfn, plus one; 0 if
 * @dev is no PCI device.
 */
u64 msvm_pci_dev_key(struct device *dev)
{
	struct pci_dev *pdev;

	if (!dev_is_pci(dev))
		return 0;
	pdev = to_pci_dev(dev);
	return (((u64)(u32)pci_domain_nr(pdev->bus) << 16) | pci_dev_id(pdev)) + 1;
}

/*
 * What BAR @bar of @pdev adds to a CPU physical address in it to make its
 * PCI bus address (pci_p2pdma_bus_addr_map()'s bus_offset).
 */
u64 msvm_pci_bar_bus_offset(struct pci_dev *pdev, int bar)
{
	return pci_bus_address(pdev, bar) - pci_resource_start(pdev, bar);
}
