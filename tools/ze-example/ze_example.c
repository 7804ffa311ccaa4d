// SPDX-License-Identifier: GPL-2.0
/*
 * msvm through oneAPI Level Zero, for runtime authors: a program written
 * for Level Zero, run on msvm's devices unchanged, with the memory a plain
 * malloc() gives it (a shared system allocation).
 *
 *   1. malloc() 4 MiB: no Level Zero allocation at all;
 *   2. advise its preferred location to be gpu0, and prefetch it there;
 *   3. fill it on gpu0 (a 16-byte pattern);
 *   4. copy it on gpu1 into a second malloc()'d buffer: gpu1 reads gpu0's
 *      memory in place, over PCIe peer-to-peer, when it can access gpu0
 *      (zeDeviceCanAccessPeer), and through system RAM otherwise;
 *   5. check both buffers on the CPU (its touch brings gpu0's pages home).
 *
 * Build: cc -o ze-example ze_example.c -lze_loader
 * Run:   ZE_ENABLE_ALT_DRIVERS=/path/to/libze_msvm.so.1 ./ze-example
 */
#include <level_zero/ze_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                       \
	do {                                                              \
		ze_result_t r_ = (call);                                  \
		if (r_ != ZE_RESULT_SUCCESS) {                            \
			fprintf(stderr, "%s:%d: %s: 0x%x\n", __FILE__,    \
				__LINE__, #call, (unsigned)r_);           \
			exit(1);                                          \
		}                                                         \
	} while (0)

#define SIZE (4u << 20)

/* An immediate command list: each append runs before it returns. */
static ze_command_list_handle_t immediate(ze_context_handle_t ctx,
					  ze_device_handle_t dev)
{
	ze_command_queue_desc_t desc = {
		.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
		.ordinal = 0, /* the copy engine: msvm's one queue group */
		.mode = ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS,
	};
	ze_command_list_handle_t list;

	CHECK(zeCommandListCreateImmediate(ctx, dev, &desc, &list));
	return list;
}

int main(void)
{
	static const uint8_t pattern[16] = { 0x6d, 0x73, 0x76, 0x6d, 0x20, 0x7a,
					     0x65, 0x21, 1, 2, 3, 4, 5, 6, 7, 8 };
	ze_driver_handle_t driver;
	ze_device_handle_t dev[2];
	uint32_t n = 1;
	ze_context_desc_t cdesc = { .stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC };
	ze_context_handle_t ctx;
	ze_device_memory_access_properties_t access = {
		.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_ACCESS_PROPERTIES,
	};
	ze_bool_t peer = 0;
	ze_command_list_handle_t gpu0, gpu1;
	uint8_t *buf, *copy;
	size_t i;

	CHECK(zeInit(0));
	CHECK(zeDriverGet(&n, &driver));
	n = 0;
	CHECK(zeDeviceGet(driver, &n, NULL));
	if (n < 2) {
		fprintf(stderr, "need two devices, found %u\n", n);
		return 1;
	}
	n = 2;
	CHECK(zeDeviceGet(driver, &n, dev));
	CHECK(zeContextCreate(driver, &cdesc, &ctx));

	/* Shared system allocations: what malloc() returns is device memory
	 * too, when the device says it can use it. */
	CHECK(zeDeviceGetMemoryAccessProperties(dev[0], &access));
	if (!(access.sharedSystemAllocCapabilities & ZE_MEMORY_ACCESS_CAP_FLAG_RW)) {
		fprintf(stderr, "gpu0 cannot use malloc()'d memory\n");
		return 1;
	}
	buf = malloc(SIZE);
	copy = malloc(SIZE);
	if (!buf || !copy)
		return 1;
	memset(copy, 0, SIZE);

	gpu0 = immediate(ctx, dev[0]);
	gpu1 = immediate(ctx, dev[1]);

	/* Where it should live, and moving it there before it is used. */
	CHECK(zeCommandListAppendMemAdvise(gpu0, dev[0], buf, SIZE,
					   ZE_MEMORY_ADVICE_SET_PREFERRED_LOCATION));
	CHECK(zeCommandListAppendMemoryPrefetch(gpu0, buf, SIZE));
	CHECK(zeCommandListAppendMemoryFill(gpu0, buf, pattern, sizeof(pattern),
					    SIZE, NULL, 0, NULL));

	/* gpu1 copies out of gpu0's memory. */
	CHECK(zeDeviceCanAccessPeer(dev[1], dev[0], &peer));
	CHECK(zeCommandListAppendMemoryCopy(gpu1, copy, buf, SIZE, NULL, 0,
					    NULL));
	printf("gpu1 %s\n", peer ? "can access gpu0's memory over P2P: it read it in place"
			      : "cannot access gpu0's memory: the copy migrated it");

	for (i = 0; i < SIZE; i++) {
		if (copy[i] != pattern[i % sizeof(pattern)] ||
		    buf[i] != pattern[i % sizeof(pattern)]) {
			fprintf(stderr, "byte %zu: copy 0x%x, source 0x%x\n", i,
				copy[i], buf[i]);
			return 1;
		}
	}
	printf("ze-example: %u MiB filled on gpu0, copied on gpu1, checked on the CPU\n",
	       SIZE >> 20);

	/* Advice outlives free(): msvm keeps a range's attributes by address,
	 * and the next allocation there would inherit them. */
	CHECK(zeCommandListAppendMemAdvise(gpu0, dev[0], buf, SIZE,
					   ZE_MEMORY_ADVICE_CLEAR_PREFERRED_LOCATION));
	CHECK(zeCommandListDestroy(gpu0));
	CHECK(zeCommandListDestroy(gpu1));
	CHECK(zeContextDestroy(ctx));
	free(buf);
	free(copy);
	return 0;
}
