// SPDX-License-Identifier: GPL-2.0

//! The registry of the bound devices: [`TOPOLOGY`] (who they are, their
//! P2P distances, their owner groups) and the counted handles through
//! which one device uses another's memory ([`PoolRef`]).
//!
//! # Lock order
//!
//! [`TOPOLOGY`] is a leaf lock: nothing else is locked while it is held.

use kernel::fmt;

use core::ops::Deref;

use kernel::{
    device::Bound,
    pci,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Relaxed, Release},
    },
};

use crate::mm::pci as mmpci;
use crate::topology::Topology;
use crate::vram::VramPool;
use kernel::sync::lock::GlobalGuard;

kernel::sync::global_lock! {
    // SAFETY: initialised by `init()` in module init, before the PCI driver
    // is registered and so before any use.
    /// The registry of the bound devices and their P2P distances.
    ///
    /// A leaf lock: nothing else is locked while it is held, and nothing
    /// that can sleep on user memory or reclaim runs under it (the QUERY
    /// ioctl snapshots what it needs and copies to user space after
    /// unlocking).
    unsafe(uninit) static TOPOLOGY: Mutex<Topology<GpuNode>> = Topology::new();
}

/// [`TOPOLOGY`], held, to read: only this module changes it (devices join
/// and leave, their pools are published), so what [`PoolRef`] trusts of a
/// node holds.
pub(crate) struct Devices(GlobalGuard<TOPOLOGY>);

impl Deref for Devices {
    type Target = Topology<GpuNode>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// The registry, locked.
pub(crate) fn devices() -> Devices {
    Devices(TOPOLOGY.lock())
}

/// The registry, if it is not locked now (from reclaim: only try).
pub(crate) fn try_devices() -> Option<Devices> {
    TOPOLOGY.try_lock().map(Devices)
}

/// Initialises [`TOPOLOGY`].
///
/// # Safety
///
/// Must be called exactly once, from module init, before anything uses
/// [`TOPOLOGY`].
pub(crate) unsafe fn init() {
    // SAFETY: the caller guarantees a single call before any use.
    unsafe { TOPOLOGY.init() };
}

/// A PCI address, as the uAPI carries it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct PciAddr {
    pub(crate) domain: u32,
    /// `bus << 8 | devfn`.
    pub(crate) bdf: u16,
}

impl PciAddr {
    pub(crate) fn of(pdev: &pci::Device<Bound>) -> Self {
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

impl GpuNode {
    /// A device as the topology keeps it, its memory not published yet
    /// ([`publish`]).
    pub(crate) fn new(pdev: ARef<pci::Device>, pci: PciAddr, vram_size: u64) -> Self {
        Self {
            pdev,
            pci,
            vram_size,
            pool: None,
        }
    }
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
/// device's teardown (`crate::device::Gpu`'s `drop`) first unpublishes the pool, then
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
        let topo = devices();
        topo.get(index).ok_or(ENOENT)?;
        if !topo.same_group(of, index) {
            return Err(ENOLINK);
        }
        Self::get_locked(&topo, index).map_err(|_| ENOENT)
    }

    /// The memory of device `index`, with the topology lock held (`topo`):
    /// `ENOENT` if no device has that index, `ENODEV` if it is going away.
    pub(crate) fn get_locked(topo: &Devices, index: usize) -> Result<Self> {
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

/// Membership of a device in [`TOPOLOGY`] ([`join`]): leaves it when
/// dropped.
pub(crate) struct Membership(usize);

impl Membership {
    /// The device's index.
    pub(crate) fn index(&self) -> usize {
        self.0
    }
}

/// Adds `node` to the registry, its P2P distance to every other device
/// measured by `distance(provider, client)`: `ENOSPC` if the registry is
/// full.
pub(crate) fn join(
    node: GpuNode,
    distance: impl Fn(&GpuNode, &GpuNode) -> Option<u32>,
) -> Result<Membership> {
    let index = TOPOLOGY.lock().insert(node, distance)?;
    Ok(Membership(index))
}

impl Drop for Membership {
    fn drop(&mut self) {
        TOPOLOGY.lock().remove(self.0);
    }
}

/// Makes `pool` the memory of device `index` for other devices
/// ([`PoolRef`]).
///
/// # Safety
///
/// `index` is the caller's own membership; `pool` must stay alive, at this
/// address, until a later [`unpublish`] of `index` has returned and, after
/// it, the pool's `users` count has come down to zero.
pub(crate) unsafe fn publish(index: usize, pool: &VramPool<'_>) {
    if let Some(node) = TOPOLOGY.lock().get_mut(index) {
        let ptr = core::ptr::from_ref(pool).cast::<VramPool<'static>>();
        node.pool = Some(PoolPtr(ptr));
    }
}

/// Takes device `index`'s memory away from new users ([`PoolRef::get_locked`]
/// fails with `ENODEV` from now on); the current ones keep it until they
/// let go.
pub(crate) fn unpublish(index: usize) {
    if let Some(node) = TOPOLOGY.lock().get_mut(index) {
        node.pool = None;
    }
}
