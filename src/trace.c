// SPDX-License-Identifier: GPL-2.0
/*
 * msvm's trace events: created here (include/msvm_trace.h), fired from Rust
 * through these functions (declared in include/msvm_helpers.h, wrapped in
 * src/mm/trace.rs). Rust cannot call the trace_*() static inlines, and the
 * kernel crate's declare_trace! reaches only tracepoints of the kernel's
 * own bindings. Each function tests the event's static key first (inside
 * trace_*()), so a disabled event costs one call. Without
 * CONFIG_TRACEPOINTS the events compile to nothing.
 */
#include "msvm_helpers.h"

#define CREATE_TRACE_POINTS
#include "msvm_trace.h"

void msvm_trace_migrate(int dev, bool to_device, u64 start, u64 end, u64 moved, u64 already,
			u64 busy, u64 no_vram, u64 folios, int result)
{
	trace_msvm_migrate(dev, to_device, start, end, moved, already, busy, no_vram, folios,
			   result);
}

void msvm_trace_cpu_fault(int dev, u64 addr, u64 pages, u64 folios)
{
	trace_msvm_cpu_fault(dev, addr, pages, folios);
}

void msvm_trace_evict(int dev, int reason, u64 offset, u64 pages)
{
	trace_msvm_evict(dev, reason, offset, pages);
}

void msvm_trace_shrink(int dev, u64 chunks, u64 moved, u64 home, u64 memmap_freed)
{
	trace_msvm_shrink(dev, chunks, moved, home, memmap_freed);
}

void msvm_trace_exec(int dev, u32 op, u64 addr, u64 len, u64 vram, u64 p2p, u64 dma,
		     u64 migrated, int result)
{
	trace_msvm_exec(dev, op, addr, len, vram, p2p, dma, migrated, result);
}

void msvm_trace_pagemap(int dev, bool create, u32 chunk, u64 bytes)
{
	trace_msvm_pagemap(dev, create, chunk, bytes);
}

void msvm_trace_pt_fault(int dev, u64 addr, u64 pages, u64 bound, int result)
{
	trace_msvm_pt_fault(dev, addr, pages, bound, result);
}

void msvm_trace_pt_invalidate(int dev, u64 start, u64 end, u64 zapped, u64 ns)
{
	trace_msvm_pt_invalidate(dev, start, end, zapped, ns);
}

void msvm_trace_fault_batch(int dev, u64 faults, u64 spans, u64 pages, u64 bound, u64 ns)
{
	trace_msvm_fault_batch(dev, faults, spans, pages, bound, ns);
}
