// SPDX-License-Identifier: GPL-2.0
/*
 * Reproducer for Linux 7.3's zap_huge_pmd() bug with in-tree parts only:
 * lib/test_hmm.c (its 2 MiB device-private folios) and MADV_DONTNEED.
 *
 * zap_huge_pmd_folio() decides "device private" from the folio
 * (folio_is_device_private()), not from the entry: a PMD *migration* entry
 * of a device-private folio (made while migrate_vma_setup() collects the
 * folio whole, MIGRATE_VMA_SELECT_COMPOUND) is zapped as if it mapped the
 * folio, dropping a folio reference and a mapping it never held. The folio
 * is freed under the migration: on a CONFIG_DEBUG_VM kernel the migration
 * then hits VM_BUG_ON (page_ref.h) in __folio_migrate_mapping(); without,
 * the device memory is handed out twice and a stale PMD migration entry is
 * left behind.
 *
 * One thread writes 8 MiB of THPs, moves them to the test_hmm device and
 * back, whole (2 MiB folios, PMD migration entries); another zaps the range
 * with MADV_DONTNEED while they come back (MIGRATE_TO_SYS). It leaves the
 * way to the device alone: test_hmm's MIGRATE_TO_DEV reads the device
 * pages back after letting go of the mmap lock, which a zap then frees (a
 * use-after-free of the test driver's own, not this bug).
 *
 * Usage: zap_huge_pmd_repro [SECONDS]   (default 20). Prints
 * "zap_huge_pmd_repro: PASS ..." and exits 0 if the run ends with every
 * byte right; a kernel with the bug oopses (the harness sees the splat)
 * or prints FAIL.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <lib/test_hmm_uapi.h>

#define PAGE 4096UL
#define HUGE (2UL << 20)
#define LEN (8UL << 20)

static int fd;
static char *region;
static void *bounce;
static atomic_int stop, to_sys;
static atomic_long moves, zaps, bad;

static void die(const char *what)
{
	fprintf(stderr, "zap_huge_pmd_repro: %s: %s\n", what, strerror(errno));
	exit(2);
}

static int migrate(unsigned long req)
{
	struct hmm_dmirror_cmd cmd = {
		.addr = (uintptr_t)region,
		.ptr = (uintptr_t)bounce,
		.npages = LEN / PAGE,
	};

	return ioctl(fd, req, &cmd);
}

static void *mover(void *arg)
{
	unsigned long n = 0;

	(void)arg;
	while (!atomic_load(&stop)) {
		unsigned char v = ++n & 0xff;
		size_t i;

		/* The zapper waits: the data must reach the device whole. */
		memset(region, v, LEN);
		for (i = 0; i < LEN; i += 512)
			if ((unsigned char)region[i] != v) {
				atomic_fetch_add(&bad, 1);
				break;
			}
		/* Errors (a range being zapped) are part of the race. */
		migrate(HMM_DMIRROR_MIGRATE_TO_DEV);
		atomic_store(&to_sys, 1);
		migrate(HMM_DMIRROR_MIGRATE_TO_SYS);
		atomic_store(&to_sys, 0);
		atomic_fetch_add(&moves, 1);
	}
	return NULL;
}

static void *zapper(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		if (!atomic_load(&to_sys))
			continue;
		if (madvise(region, LEN, MADV_DONTNEED))
			die("madvise");
		atomic_fetch_add(&zaps, 1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int secs = argc > 1 ? atoi(argv[1]) : 20;
	pthread_t a, b;
	char *p;

	fd = open("/dev/hmm_dmirror0", O_RDWR);
	if (fd < 0)
		die("open /dev/hmm_dmirror0 (is test_hmm.ko loaded?)");
	p = mmap(NULL, LEN + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	region = (char *)(((uintptr_t)p + HUGE - 1) & ~(HUGE - 1));
	if (madvise(region, LEN, MADV_HUGEPAGE))
		die("madvise(MADV_HUGEPAGE)");
	memset(region, 0x5a, LEN);
	bounce = malloc(LEN);
	if (!bounce)
		die("malloc");
	if (pthread_create(&a, NULL, mover, NULL) || pthread_create(&b, NULL, zapper, NULL))
		die("pthread_create");
	sleep(secs);
	atomic_store(&stop, 1);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	printf("zap_huge_pmd_repro: %s: %ld round trips, %ld zaps, %ld bad reads in %d s\n",
	       atomic_load(&bad) ? "FAIL" : "PASS", atomic_load(&moves), atomic_load(&zaps),
	       atomic_load(&bad), secs);
	return atomic_load(&bad) ? 1 : 0;
}
