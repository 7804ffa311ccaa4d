// SPDX-License-Identifier: GPL-2.0
/*
 * msvm for runtime authors: a walk through the uAPI in C, with
 * include/uapi/drm/msvm_drm.h alone (and the kernel's drm.h it includes).
 *
 *  1. Find msvm's render nodes (/sys/class/drm/renderD*, driver "msvm").
 *  2. QUERY each one: its index, VRAM, owner group, and the P2P matrix.
 *  3. Create a VM on each: the device now works on this process's memory.
 *  4. Allocate ordinary memory (malloc'd, page aligned) and write it.
 *  5. SET_ATTR: the buffer prefers the first device.
 *  6. PREFETCH it there, then RESIDENCY: where the bytes live.
 *  7. EXEC a CHECKSUM job on every device: each runs on the same memory
 *     (a peer reads it over P2P or migrates it; the result is the same).
 *  8. Touch the buffer from the CPU: the pages come home, intact.
 *
 * Exit status 0 if every step did what the uAPI says; the output is a
 * line per step. Built static by scripts/build.sh c-example and run by
 * make test in the guest; Documentation/uapi.rst links it.
 */
#define _GNU_SOURCE /* versionsort */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "msvm_drm.h"

#define MAX_NODES 16
#define LEN (8u << 20)

struct node {
	char path[PATH_MAX];
	int fd;
	struct drm_msvm_query info;
};

static int failures;

/* Reports a failed step with the node and the errno text. */
static void fail(const char *what, const char *path)
{
	fprintf(stderr, "msvm-example: %s on %s: %s\n", what, path, strerror(errno));
	failures++;
}

#define CHECK(cond, ...)                                       \
	do {                                                   \
		if (!(cond)) {                                 \
			fprintf(stderr, "msvm-example: " __VA_ARGS__); \
			fputc('\n', stderr);                   \
			failures++;                            \
		}                                              \
	} while (0)

/* Step 1: the render nodes whose driver is msvm, in node order. */
static int find_nodes(struct node *nodes)
{
	struct dirent **names;
	int n = scandir("/sys/class/drm", &names, NULL, versionsort);
	int found = 0;

	for (int i = 0; i < n; i++) {
		char link[PATH_MAX], target[PATH_MAX];
		ssize_t len;

		if (strncmp(names[i]->d_name, "renderD", 7) == 0 && found < MAX_NODES) {
			snprintf(link, sizeof(link), "/sys/class/drm/%s/device/driver",
				 names[i]->d_name);
			len = readlink(link, target, sizeof(target) - 1);
			if (len > 0) {
				target[len] = 0;
				if (strcmp(strrchr(target, '/') + 1, "msvm") == 0) {
					snprintf(nodes[found].path, sizeof(nodes[found].path),
						 "/dev/dri/%s", names[i]->d_name);
					found++;
				}
			}
		}
		free(names[i]);
	}
	free(names);
	return found;
}

/* FNV-1a, as the engine's CHECKSUM computes it. */
static uint64_t fnv1a(const unsigned char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

int main(void)
{
	struct node nodes[MAX_NODES];
	int n = find_nodes(nodes);
	unsigned char *buf;
	uint64_t want;

	printf("1. %d msvm render node(s)\n", n);
	if (n == 0)
		return 1;

	/* Step 2: each device, and how it reaches the others. */
	for (int i = 0; i < n; i++) {
		struct drm_msvm_query *q = &nodes[i].info;
		struct drm_msvm_peer peers[MSVM_MAX_DEVICES];

		nodes[i].fd = open(nodes[i].path, O_RDWR | O_CLOEXEC);
		if (nodes[i].fd < 0) {
			fail("open", nodes[i].path);
			return 1;
		}
		memset(q, 0, sizeof(*q));
		q->device = MSVM_QUERY_SELF;
		q->peer_size = sizeof(peers[0]);
		q->num_peers = MSVM_MAX_DEVICES;
		q->peers_ptr = (uintptr_t)peers;
		if (ioctl(nodes[i].fd, DRM_IOCTL_MSVM_QUERY, q)) {
			fail("QUERY", nodes[i].path);
			return 1;
		}
		CHECK(q->version >= 12, "%s: uAPI version %u, this example wants 12",
		      nodes[i].path, q->version);
		printf("2. %s: gpu%u of %u, %llu MiB of VRAM, owner group %u; peers:",
		       nodes[i].path, q->index, q->num_devices,
		       (unsigned long long)(q->vram_size >> 20), q->owner_group);
		for (unsigned int k = 0; k < q->num_peers && k < MSVM_MAX_DEVICES; k++)
			printf(" gpu%u %s (distance %d)", peers[k].index,
			       peers[k].flags & MSVM_PEER_P2P ? "P2P" : "no P2P",
			       peers[k].distance);
		printf("\n");
	}

	/* Step 3: a VM per device, on this process's address space. */
	for (int i = 0; i < n; i++) {
		struct drm_msvm_vm_create vm = { 0 };

		if (ioctl(nodes[i].fd, DRM_IOCTL_MSVM_VM_CREATE, &vm))
			fail("VM_CREATE", nodes[i].path);
	}
	printf("3. a VM on each device\n");

	/* Step 4: ordinary memory, written by the CPU. */
	if (posix_memalign((void **)&buf, 2u << 20, LEN))
		return 1;
	for (size_t i = 0; i < LEN; i++)
		buf[i] = (unsigned char)(i * 7 + i / 4096);
	want = fnv1a(buf, LEN);
	printf("4. %u MiB of malloc'd memory, checksum %016llx\n", LEN >> 20,
	       (unsigned long long)want);

	/* Step 5: it prefers the first device (for that device's jobs). */
	struct drm_msvm_set_attr attr = {
		.addr = (uintptr_t)buf,
		.length = LEN,
		.location = MSVM_LOC_DEVICE,
		.device = MSVM_QUERY_SELF,
		.access = MSVM_ACCESS_MIGRATE,
	};
	if (ioctl(nodes[0].fd, DRM_IOCTL_MSVM_SET_ATTR, &attr))
		fail("SET_ATTR", nodes[0].path);
	printf("5. preferred location: gpu%u\n", nodes[0].info.index);

	/* Step 6: prefetch it there, and ask where it lives. */
	struct drm_msvm_prefetch pf = {
		.addr = (uintptr_t)buf,
		.length = LEN,
		.location = MSVM_LOC_DEVICE,
		.device = MSVM_QUERY_SELF,
	};
	if (ioctl(nodes[0].fd, DRM_IOCTL_MSVM_PREFETCH, &pf))
		fail("PREFETCH", nodes[0].path);
	struct drm_msvm_residency res = { .addr = (uintptr_t)buf, .length = LEN };

	if (ioctl(nodes[0].fd, DRM_IOCTL_MSVM_RESIDENCY, &res))
		fail("RESIDENCY", nodes[0].path);
	printf("6. PREFETCH moved %llu pages (%llu already there); RESIDENCY: %llu MiB on gpu%u, %llu MiB in system RAM\n",
	       (unsigned long long)pf.moved, (unsigned long long)pf.already,
	       (unsigned long long)(res.devices[nodes[0].info.index] >> 20),
	       nodes[0].info.index, (unsigned long long)(res.system >> 20));
	CHECK(res.devices[nodes[0].info.index] == LEN,
	      "RESIDENCY after PREFETCH: %llu bytes on the device, want %u",
	      (unsigned long long)res.devices[nodes[0].info.index], LEN);

	/* Step 7: every device checksums the same memory. */
	for (int i = 0; i < n; i++) {
		struct drm_msvm_exec job = {
			.op = MSVM_EXEC_CHECKSUM,
			.addr = (uintptr_t)buf,
			.length = LEN,
		};

		if (ioctl(nodes[i].fd, DRM_IOCTL_MSVM_EXEC, &job)) {
			fail("EXEC", nodes[i].path);
			continue;
		}
		printf("7. gpu%u: CHECKSUM %016llx, %llu pages migrated for it\n",
		       nodes[i].info.index, (unsigned long long)job.result,
		       (unsigned long long)job.migrated);
		CHECK(job.result == want, "gpu%u computed %016llx, the CPU %016llx",
		      nodes[i].info.index, (unsigned long long)job.result,
		      (unsigned long long)want);
	}

	/* Step 8: the CPU reads it: every page comes home with its bytes. */
	uint64_t again = fnv1a(buf, LEN);

	if (ioctl(nodes[0].fd, DRM_IOCTL_MSVM_RESIDENCY, &res))
		fail("RESIDENCY", nodes[0].path);
	printf("8. the CPU reads it: checksum %016llx, %llu MiB in system RAM\n",
	       (unsigned long long)again, (unsigned long long)(res.system >> 20));
	CHECK(again == want, "the CPU read %016llx after the jobs, wrote %016llx",
	      (unsigned long long)again, (unsigned long long)want);
	CHECK(res.system == LEN, "RESIDENCY after the CPU read: %llu bytes in RAM",
	      (unsigned long long)res.system);

	for (int i = 0; i < n; i++)
		close(nodes[i].fd);
	free(buf);
	printf("msvm-example: %s\n", failures ? "FAILED" : "ok");
	return failures ? 1 : 0;
}
