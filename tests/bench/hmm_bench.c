// SPDX-License-Identifier: GPL-2.0
/*
 * The baseline side of `make bench`: times the kernel's test_hmm driver
 * (lib/test_hmm.c, /dev/hmm_dmirror0) moving SIZE MiB to its device memory
 * and back, explicitly and by CPU faults. Built static against the kernel
 * source's lib/test_hmm_uapi.h (not copied here).
 *
 * Usage: hmm-bench SIZE_MIB TAG   prints "BENCH <op><TAG>_<SIZE>M.test_hmm <GiB/s> GiB/s"
 * (TAG is empty or "_4k").
 */
#include <errno.h>
#include <fcntl.h>
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
#define ROUNDS 3

static double min(double a, double b)
{
	return a < b ? a : b;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "hmm-bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void *map(size_t len)
{
	/* 2 MiB aligned, so that THP can back it when enabled. */
	char *p = mmap(NULL, len + (2UL << 20), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap");
	p = (char *)(((uintptr_t)p + (2UL << 20) - 1) & ~((2UL << 20) - 1));
	madvise(p, len, MADV_HUGEPAGE);
	return p;
}

static void migrate(int fd, unsigned long req, void *p, void *bounce, size_t len)
{
	struct hmm_dmirror_cmd cmd = {
		.addr = (uintptr_t)p,
		.ptr = (uintptr_t)bounce,
		.npages = len / PAGE,
	};

	if (ioctl(fd, req, &cmd))
		die("ioctl");
	/* cpages counts folios on some paths (2 MiB each with THP): the data
	 * check at the end is what proves every page made the trip. */
	if (!cmd.cpages) {
		fprintf(stderr, "hmm-bench: nothing moved\n");
		exit(1);
	}
}

static void report(const char *op, unsigned long mib, const char *tag, size_t len, double secs)
{
	printf("BENCH %s%s_%luM.test_hmm %.3f GiB/s\n", op, tag, mib,
	       len / secs / (1UL << 30));
}

int main(int argc, char **argv)
{
	unsigned long mib = argc > 1 ? strtoul(argv[1], NULL, 0) : 64;
	const char *tag = argc > 2 ? argv[2] : "";
	size_t len = mib << 20, i;
	int fd = open("/dev/hmm_dmirror0", O_RDWR);
	uint64_t *p, sum = 0;
	void *bounce;
	double t, best[3] = { 1e9, 1e9, 1e9 };
	int r;

	if (fd < 0)
		die("open /dev/hmm_dmirror0");
	p = map(len);
	bounce = malloc(len);
	if (!bounce)
		die("malloc");
	for (i = 0; i < len / 8; i++)
		p[i] = i * 0x9e3779b97f4a7c15ULL;

	/* Best of ROUNDS round trips: under TCG single runs move by 2x. */
	for (r = 0; r < ROUNDS; r++) {
		t = now();
		migrate(fd, HMM_DMIRROR_MIGRATE_TO_DEV, p, bounce, len);
		best[0] = min(best[0], now() - t);

		t = now();
		migrate(fd, HMM_DMIRROR_MIGRATE_TO_SYS, p, bounce, len);
		best[1] = min(best[1], now() - t);

		migrate(fd, HMM_DMIRROR_MIGRATE_TO_DEV, p, bounce, len);
		t = now();
		for (i = 0; i < len / 8; i += PAGE / 8)
			sum += p[i];
		best[2] = min(best[2], now() - t);
	}
	report("to_dev", mib, tag, len, best[0]);
	report("to_sys", mib, tag, len, best[1]);
	report("fault_back", mib, tag, len, best[2]);

	for (i = 0; i < len / 8; i++)
		if (p[i] != i * 0x9e3779b97f4a7c15ULL) {
			fprintf(stderr, "hmm-bench: data lost at word %zu\n", i);
			return 1;
		}
	return sum == 42; /* keep the reads */
}
