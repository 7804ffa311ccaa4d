// SPDX-License-Identifier: GPL-2.0

//! One msvm GPU: a bound PCI device, its VRAM and its place in the topology.

use kernel::fmt;

use core::ops::Deref;

use kernel::{
    device::Bound,
    pci,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Acquire, Relaxed, Release},
    },
};

use crate::mm::{iomem::WcBar, pci as mmpci};
use crate::topology::{Topology, TOPOLOGY};
use crate::vram::VramPool;

/// The kinds of device msvm drives, from the PCI id table
/// (`driver::PCI_TABLE`).
pub(crate) struct DeviceKind {
    /// The BAR that exposes the device's memory.
    pub(crate) vram_bar: u32,
    /// A short name for logs.
    pub(crate) name: &'static str,
}

/// A PCI address, as the uAPI carries it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct PciAddr {
    pub(crate) domain: u32,
    /// `bus << 8 | devfn`.
    pub(crate) bdf: u16,
}

impl PciAddr {
    fn of(pdev: &pci::Device<Bound>) -> Self {
        Self {
            domain: mmpci::domain_nr(pdev),
            bdf: pdev.dev_id(),
        }
    }
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{}",
            self.domain,
            self.bdf >> 8,
            (self.bdf >> 3) & 0x1f,
            self.bdf & 7
        )
    }
}

/// What the topology keeps of each device.
pub(crate) struct GpuNode {
    pub(crate) pdev: ARef<pci::Device>,
    pub(crate) pci: PciAddr,
    pub(crate) vram_size: u64,
    /// The device's memory while it takes new users: set once the pool
    /// exists, cleared when the device starts going away.
    pool: Option<PoolPtr>,
}

/// The address of a device's pool, as the topology keeps it.
#[derive(Clone, Copy)]
struct PoolPtr(*const VramPool<'static>);

// SAFETY: the pool is `Sync`; the pointer is only dereferenced under the
// rules of `PoolRef`.
unsafe impl Send for PoolPtr {}

/// A counted use of a device's memory, taken by index through the
/// topology: how one device works on another's memory pool (a prefetch to
/// a peer, a job whose preferred location is a peer).
///
/// # Invariants
///
/// `pool` is alive and its `users` count includes this reference: the
/// device's teardown ([`Gpu`]'s `drop`) first unpublishes the pool, then
/// waits for the count to reach zero before the pool goes.
pub(crate) struct PoolRef {
    pool: *const VramPool<'static>,
}

impl PoolRef {
    /// The memory of device `index` for device `of`, which must share its
    /// owner group: `ENOENT` if no device has that index or it is going
    /// away, `ENOLINK` if it is in another group. One look at the topology:
    /// an index reused by another device meanwhile is checked afresh.
    pub(crate) fn get_in_group(index: usize, of: usize) -> Result<Self> {
        let topo = TOPOLOGY.lock();
        topo.get(index).ok_or(ENOENT)?;
        if !topo.same_group(of, index) {
            return Err(ENOLINK);
        }
        Self::get_locked(&topo, index).map_err(|_| ENOENT)
    }

    /// The memory of device `index`, with the topology lock held (`topo`):
    /// `ENOENT` if no device has that index, `ENODEV` if it is going away.
    pub(crate) fn get_locked(topo: &Topology<GpuNode>, index: usize) -> Result<Self> {
        let node = topo.get(index).ok_or(ENOENT)?;
        let ptr = node.pool.ok_or(ENODEV)?.0;
        // SAFETY: a published pool is alive: `Gpu::drop` unpublishes it
        // under the topology lock, which the caller holds, before waiting
        // for users.
        unsafe { &*ptr }.users.add(1, Relaxed);
        Ok(Self { pool: ptr })
    }
}

impl Deref for PoolRef {
    type Target = VramPool<'static>;

    fn deref(&self) -> &Self::Target {
        // SAFETY: alive while counted (type invariant).
        unsafe { &*self.pool }
    }
}

impl Drop for PoolRef {
    fn drop(&mut self) {
        // Release: everything this user did to the pool happens before the
        // teardown sees the count drop.
        self.users.fetch_sub(1, Release);
    }
}

/// Membership of a device in [`TOPOLOGY`]: leaves it when dropped.
struct Membership(usize);

impl Drop for Membership {
    fn drop(&mut self) {
        TOPOLOGY.lock().remove(self.0);
    }
}

/// A bound msvm GPU. It is the DRM registration data of the device: the
/// ioctl handlers get it, and it lives until the device is unbound.
pub(crate) struct Gpu<'a> {
    /// msvm device index (also the topology index).
    pub(crate) index: usize,
    pdev: &'a pci::Device<Bound>,
    /// The device memory: its BAR window and its chunks. Dropped before the
    /// topology membership, after the DRM device is unplugged: every page
    /// goes home first.
    vram: Pin<KBox<VramPool<'a>>>,
    _member: Membership,
}

/// Bytes per chunk of device memory (module parameter `chunk_mib`).
fn chunk_size() -> usize {
    let mib = crate::module_parameters::chunk_mib.value().clamp(2, 1024);
    mib as usize * 1024 * 1024
}

impl<'a> Gpu<'a> {
    /// The device memory.
    pub(crate) fn vram(&self) -> &VramPool<'a> {
        &self.vram
    }

    /// The generic device, for DMA mappings.
    pub(crate) fn device(&self) -> &kernel::device::Device<Bound> {
        self.pdev.as_ref()
    }

    /// Maps the VRAM of `pdev` and adds the device to the topology.
    pub(crate) fn new(pdev: &'a pci::Device<Bound>, kind: &DeviceKind) -> Result<Self> {
        let vram = WcBar::new(pdev, kind.vram_bar, c"msvm-vram")?;
        vram_selftest(&vram).inspect_err(|e| {
            dev_err!(
                pdev.as_ref(),
                "VRAM (BAR{}) does not hold data: {e:?}\n",
                kind.vram_bar
            )
        })?;
        let pci = PciAddr::of(pdev);
        let node = GpuNode {
            pdev: ARef::from(&**pdev),
            pci,
            vram_size: vram.len() as u64,
            pool: None,
        };
        let index = TOPOLOGY
            .lock()
            .insert(node, |provider, client| {
                mmpci::p2pdma_distance(&provider.pdev, &client.pdev)
            })
            .inspect_err(|_| {
                dev_err!(
                    pdev.as_ref(),
                    "too many msvm devices (at most {})\n",
                    crate::topology::MAX_DEVICES
                )
            })?;
        let member = Membership(index);
        let group = TOPOLOGY.lock().group(index).unwrap_or(index);
        {
            let topo = TOPOLOGY.lock();
            for peer in topo.peers(index) {
                let other = topo.get(peer.index).map(|n| n.pci);
                match (other, peer.distance) {
                    (Some(o), Some(d)) => dev_info!(
                        pdev.as_ref(),
                        "gpu{index} -> gpu{} ({o}): P2P, distance {d}\n",
                        peer.index
                    ),
                    (Some(o), None) => dev_info!(
                        pdev.as_ref(),
                        "gpu{index} -> gpu{} ({o}): no P2P path\n",
                        peer.index
                    ),
                    (None, _) => {}
                }
            }
        }
        dev_info!(
            pdev.as_ref(),
            "gpu{index}: {} at {pci}, {} MiB VRAM (BAR{}, write-combined), {} MiB chunks, owner group {group}\n",
            kind.name,
            vram.len() >> 20,
            kind.vram_bar,
            chunk_size() >> 20
        );
        let vram = VramPool::new(
            vram,
            chunk_size(),
            crate::topology::owner_token(group),
            index,
        )?;
        if let Some(node) = TOPOLOGY.lock().get_mut(index) {
            let ptr = core::ptr::from_ref(&*vram).cast::<VramPool<'static>>();
            node.pool = Some(PoolPtr(ptr));
        }
        Ok(Self {
            index,
            pdev,
            vram,
            _member: member,
        })
    }
}

impl Drop for Gpu<'_> {
    fn drop(&mut self) {
        // No new users from other devices; then wait for the current ones
        // (their work is bounded: a prefetch or a job) before the pool's
        // own teardown sends every page home.
        if let Some(node) = TOPOLOGY.lock().get_mut(self.index) {
            node.pool = None;
        }
        let mut waited = 0u32;
        while self.vram.users.load(Acquire) != 0 {
            if waited % 1000 == 999 {
                pr_warn!("msvm: gpu{}: still in use by peers\n", self.index);
            }
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(1));
            waited += 1;
        }
    }
}

/// Checks that the BAR really is memory: a pattern written at both ends of it
/// through the write-combined mapping reads back unchanged. Run at probe,
/// before anything lives in the VRAM.
fn vram_selftest(vram: &WcBar<'_>) -> Result {
    const LEN: usize = 256;
    let mut pattern = [0u8; LEN];
    let mut back = [0u8; LEN];
    for offset in [0, vram.len().saturating_sub(LEN)] {
        for (i, b) in pattern.iter_mut().enumerate() {
            *b = (i ^ (offset >> 12) ^ 0xa5) as u8;
        }
        vram.write(offset, &pattern)?;
        vram.read(offset, &mut back)?;
        if back != pattern {
            return Err(EIO);
        }
    }
    Ok(())
}
