// SPDX-License-Identifier: GPL-2.0
/*
 * The glue's C pieces (static-inline kernel functions that Rust cannot
 * call, page allocations, KUnit cases' helpers, and the zap_huge_pmd()
 * workaround's locks), built into msvm_dmirror.ko as into msvm.ko.
 */
#include "../src/helpers.c"
#include "../src/helpers_alloc.c"
#include "../src/helpers_kunit.c"
#include "../src/zap_huge_pmd.c"
