// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers of msvm: wrappers for static-inline kernel functions. Declared in
 * include/msvm_helpers.h and reached from Rust through src/mm/bindings.rs.
 */
#include <linux/pci.h>

#include "msvm_helpers.h"

int msvm_pci_domain_nr(struct pci_dev *pdev)
{
	return pci_domain_nr(pdev->bus);
}
