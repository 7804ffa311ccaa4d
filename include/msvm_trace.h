/* SPDX-License-Identifier: GPL-2.0 */
/*
 * msvm's trace events (system "msvm" in tracefs): what perf, trace-cmd and
 * bpftrace users see of msvm. Created in src/trace.c, fired from Rust
 * through the msvm_trace_*() functions declared in include/msvm_helpers.h
 * (src/mm/trace.rs). Device numbers are msvm's ("gpuN").
 * Documentation/reference.rst lists the events and their fields.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM msvm

#if !defined(_MSVM_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _MSVM_TRACE_H

#include <linux/tracepoint.h>

/* One MIGRATE, PREFETCH, placement move or eviction of a range. */
TRACE_EVENT(msvm_migrate,
	TP_PROTO(int dev, bool to_device, u64 start, u64 end, u64 moved, u64 already,
		 u64 busy, u64 no_vram, u64 folios, int result),
	TP_ARGS(dev, to_device, start, end, moved, already, busy, no_vram, folios, result),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(bool, to_device)
		__field(u64, start)
		__field(u64, end)
		__field(u64, moved)
		__field(u64, already)
		__field(u64, busy)
		__field(u64, no_vram)
		__field(u64, folios)
		__field(int, result)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->to_device = to_device;
		__entry->start = start;
		__entry->end = end;
		__entry->moved = moved;
		__entry->already = already;
		__entry->busy = busy;
		__entry->no_vram = no_vram;
		__entry->folios = folios;
		__entry->result = result;
	),
	TP_printk("gpu%d %s start=0x%llx end=0x%llx moved=%llu already=%llu busy=%llu no_vram=%llu folios=%llu result=%d",
		  __entry->dev, __entry->to_device ? "to_device" : "to_system",
		  __entry->start, __entry->end, __entry->moved, __entry->already,
		  __entry->busy, __entry->no_vram, __entry->folios, __entry->result)
);

/* A CPU fault on a device page: the pages it brought home. */
TRACE_EVENT(msvm_cpu_fault,
	TP_PROTO(int dev, u64 addr, u64 pages, u64 folios),
	TP_ARGS(dev, addr, pages, folios),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u64, addr)
		__field(u64, pages)
		__field(u64, folios)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->addr = addr;
		__entry->pages = pages;
		__entry->folios = folios;
	),
	TP_printk("gpu%d addr=0x%llx pages=%llu folios=%llu",
		  __entry->dev, __entry->addr, __entry->pages, __entry->folios)
);

/*
 * Device memory given back: a 2 MiB block evicted to make room (reason 0,
 * "room"), or a chunk emptied because its device goes away or the module
 * unloads (reason 1, "teardown").
 */
TRACE_EVENT(msvm_evict,
	TP_PROTO(int dev, int reason, u64 offset, u64 pages),
	TP_ARGS(dev, reason, offset, pages),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(int, reason)
		__field(u64, offset)
		__field(u64, pages)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->reason = reason;
		__entry->offset = offset;
		__entry->pages = pages;
	),
	TP_printk("gpu%d %s vram_offset=0x%llx pages=%llu", __entry->dev,
		  __print_symbolic(__entry->reason, { 0, "room" }, { 1, "teardown" }),
		  __entry->offset, __entry->pages)
);

/* One shrink pass over a device (the shrinker's or debugfs'). */
TRACE_EVENT(msvm_shrink,
	TP_PROTO(int dev, u64 chunks, u64 moved, u64 home, u64 memmap_freed),
	TP_ARGS(dev, chunks, moved, home, memmap_freed),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u64, chunks)
		__field(u64, moved)
		__field(u64, home)
		__field(u64, memmap_freed)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->chunks = chunks;
		__entry->moved = moved;
		__entry->home = home;
		__entry->memmap_freed = memmap_freed;
	),
	TP_printk("gpu%d chunks=%llu moved=%llu home=%llu memmap_freed=%llu",
		  __entry->dev, __entry->chunks, __entry->moved, __entry->home,
		  __entry->memmap_freed)
);

/* One EXEC: its operation and the pages it used by path. */
TRACE_EVENT(msvm_exec,
	TP_PROTO(int dev, u32 op, u64 addr, u64 len, u64 vram, u64 p2p, u64 dma,
		 u64 migrated, int result),
	TP_ARGS(dev, op, addr, len, vram, p2p, dma, migrated, result),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u32, op)
		__field(u64, addr)
		__field(u64, len)
		__field(u64, vram)
		__field(u64, p2p)
		__field(u64, dma)
		__field(u64, migrated)
		__field(int, result)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->op = op;
		__entry->addr = addr;
		__entry->len = len;
		__entry->vram = vram;
		__entry->p2p = p2p;
		__entry->dma = dma;
		__entry->migrated = migrated;
		__entry->result = result;
	),
	TP_printk("gpu%d op=%s addr=0x%llx len=%llu vram=%llu p2p=%llu dma=%llu migrated=%llu result=%d",
		  __entry->dev,
		  __print_symbolic(__entry->op, { 1, "fill" }, { 2, "copy" },
				   { 3, "atomic_add" }, { 4, "checksum" }),
		  __entry->addr, __entry->len, __entry->vram, __entry->p2p,
		  __entry->dma, __entry->migrated, __entry->result)
);

/* A chunk's pagemap (struct pages for its device memory) made or removed. */
TRACE_EVENT(msvm_pagemap,
	TP_PROTO(int dev, bool create, u32 chunk, u64 bytes),
	TP_ARGS(dev, create, chunk, bytes),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(bool, create)
		__field(u32, chunk)
		__field(u64, bytes)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->create = create;
		__entry->chunk = chunk;
		__entry->bytes = bytes;
	),
	TP_printk("gpu%d %s chunk=%u bytes=%llu", __entry->dev,
		  __entry->create ? "create" : "destroy", __entry->chunk, __entry->bytes)
);

/* A window of a job that faulted: resolved, run and bound (device page tables). */
TRACE_EVENT(msvm_pt_fault,
	TP_PROTO(int dev, u64 addr, u64 pages, u64 bound, int result),
	TP_ARGS(dev, addr, pages, bound, result),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u64, addr)
		__field(u64, pages)
		__field(u64, bound)
		__field(int, result)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->addr = addr;
		__entry->pages = pages;
		__entry->bound = bound;
		__entry->result = result;
	),
	TP_printk("gpu%d addr=0x%llx pages=%llu bound=%llu result=%d", __entry->dev,
		  __entry->addr, __entry->pages, __entry->bound, __entry->result)
);

/* An invalidation of a process's page tables that zapped a device page table's entries. */
TRACE_EVENT(msvm_pt_invalidate,
	TP_PROTO(int dev, u64 start, u64 end, u64 zapped, u64 ns),
	TP_ARGS(dev, start, end, zapped, ns),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u64, start)
		__field(u64, end)
		__field(u64, zapped)
		__field(u64, ns)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->start = start;
		__entry->end = end;
		__entry->zapped = zapped;
		__entry->ns = ns;
	),
	TP_printk("gpu%d start=0x%llx end=0x%llx zapped=%llu ns=%llu", __entry->dev,
		  __entry->start, __entry->end, __entry->zapped, __entry->ns)
);

TRACE_EVENT(msvm_fault_batch,
	TP_PROTO(int dev, u64 faults, u64 spans, u64 pages, u64 bound, u64 ns),
	TP_ARGS(dev, faults, spans, pages, bound, ns),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u64, faults)
		__field(u64, spans)
		__field(u64, pages)
		__field(u64, bound)
		__field(u64, ns)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->faults = faults;
		__entry->spans = spans;
		__entry->pages = pages;
		__entry->bound = bound;
		__entry->ns = ns;
	),
	TP_printk("gpu%d faults=%llu spans=%llu pages=%llu bound=%llu ns=%llu", __entry->dev,
		  __entry->faults, __entry->spans, __entry->pages, __entry->bound, __entry->ns)
);

#endif /* _MSVM_TRACE_H */

/* This part must be outside the include guard. */
#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE msvm_trace
#include <trace/define_trace.h>
