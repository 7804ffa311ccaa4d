// SPDX-License-Identifier: GPL-2.0
/*
 * Reproducer for Linux 7.3's migrate_device_range() walking a freed
 * anon_vma, with in-tree parts only: lib/test_hmm.c, whose
 * HMM_DMIRROR_RELEASE evicts every page of its device by frame
 * (dmirror_device_evict_chunk(): migrate_device_range(), a copy of each
 * page, migrate_device_pages(), migrate_device_finalize()).
 *
 * migrate_device_unmap() holds no reference on the folios' anon_vma and the
 * eviction no lock of any mm: a process that exits after its pages were
 * unmapped for the eviction frees their anon_vma (free_pgtables() ->
 * unlink_anon_vmas()), and finalize's remove_migration_ptes() walks it.
 *
 * Each round, a child writes 64 MiB of 4 KiB pages, moves them to the
 * device and waits; the parent starts HMM_DMIRROR_RELEASE in a thread and
 * kills the child a few milliseconds later, while the eviction copies.
 *
 * Usage: migrate_device_anon_vma_repro [SECONDS]   (default 20). Prints
 * "migrate_device_anon_vma_repro: PASS ..." once the time is up; a kernel
 * with the bug reports a use-after-free in rmap_walk_anon() (KASAN with
 * CONFIG_SLUB_RCU_DEBUG), which the harness sees.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lib/test_hmm_uapi.h>

#define PAGE 4096UL
#define LEN (64UL << 20)

static void die(const char *what)
{
	fprintf(stderr, "migrate_device_anon_vma_repro: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* The child: its pages on the device, then it waits to be killed. */
static void child(int ready)
{
	struct hmm_dmirror_cmd cmd = { 0 };
	int fd = open("/dev/hmm_dmirror0", O_RDWR);
	char *p;
	void *bounce;

	if (fd < 0)
		die("open /dev/hmm_dmirror0");
	p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	if (madvise(p, LEN, MADV_NOHUGEPAGE))
		die("madvise");
	memset(p, 0x5a, LEN);
	bounce = malloc(LEN);
	if (!bounce)
		die("malloc");
	cmd.addr = (uintptr_t)p;
	cmd.ptr = (uintptr_t)bounce;
	cmd.npages = LEN / PAGE;
	if (ioctl(fd, HMM_DMIRROR_MIGRATE_TO_DEV, &cmd))
		die("HMM_DMIRROR_MIGRATE_TO_DEV");
	if (write(ready, "x", 1) != 1)
		die("write");
	for (;;)
		pause();
}

static int release_fd;

static void *release(void *arg)
{
	/* test_hmm checks every command's range: one page at address 0. */
	struct hmm_dmirror_cmd cmd = { .npages = 1 };

	(void)arg;
	if (ioctl(release_fd, HMM_DMIRROR_RELEASE, &cmd))
		die("HMM_DMIRROR_RELEASE");
	return NULL;
}

int main(int argc, char **argv)
{
	int secs = argc > 1 ? atoi(argv[1]) : 20;
	time_t end = time(NULL) + secs;
	long rounds = 0;

	release_fd = open("/dev/hmm_dmirror0", O_RDWR);
	if (release_fd < 0)
		die("open /dev/hmm_dmirror0 (is test_hmm.ko loaded?)");
	srand(1);
	while (time(NULL) < end) {
		struct timespec d = { 0, (rand() % 40) * 1000000L };
		int fds[2];
		pthread_t t;
		pid_t pid;
		char b;

		if (pipe(fds))
			die("pipe");
		pid = fork();
		if (pid < 0)
			die("fork");
		if (pid == 0) {
			close(fds[0]);
			child(fds[1]);
		}
		close(fds[1]);
		if (read(fds[0], &b, 1) != 1)
			die("the child did not move its pages");
		close(fds[0]);
		if (pthread_create(&t, NULL, release, NULL))
			die("pthread_create");
		nanosleep(&d, NULL);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		pthread_join(t, NULL);
		rounds++;
	}
	printf("migrate_device_anon_vma_repro: PASS: %ld rounds (64 MiB evicted by frame while its process was killed) in %d s\n",
	       rounds, secs);
	return 0;
}
