/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Input of msvm's bindgen step (see Kbuild): the kernel C APIs msvm uses that
 * the kernel's `bindings` crate lacks, msvm's uAPI and msvm's C helpers.
 * Only src/mm/ may use what this generates.
 */
#include <linux/hmm.h>
#include <linux/io.h>
#include <linux/mmu_notifier.h>
#include <linux/memremap.h>
#include <linux/migrate.h>
#include <linux/mm.h>
#include <linux/pci.h>
#include <linux/pci-p2pdma.h>
#include <linux/rmap.h>
#include <drm/drm.h>

#include "uapi/drm/msvm_drm.h"
#include "msvm_helpers.h"
