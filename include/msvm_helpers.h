/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers of msvm (src/helpers.c): wrappers for static-inline kernel
 * functions that bindgen cannot turn into callable symbols.
 */
#ifndef _MSVM_HELPERS_H_
#define _MSVM_HELPERS_H_

#include <linux/pci.h>

int msvm_pci_domain_nr(struct pci_dev *pdev);

#endif /* _MSVM_HELPERS_H_ */
