// SPDX-License-Identifier: GPL-2.0

//! The registry of the bound devices: [`TOPOLOGY`] (who they are, their
//! P2P distances, their owner groups) and the counted handles through
//! which one device uses another's memory ([`PoolRef`]).
//!
//! A device publishes its pool once it has one ([`publish`]) and withdraws
//! it before it shuts the pool down (dropping its [`Publication`]), waiting
//! for the peers that use it.
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
        atomic::{Atomic, Full, Relaxed},
        Arc, Completion,
    },
};

use crate::mm::pci::{self as mmpci, P2pLink};
use crate::topology::{Topology, MAX_DEVICES};
use crate::vram::VramPool;
use kernel::sync::lock::GlobalGuard;

use crate::lockstat::{self, LockStat};

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
pub(crate) struct Devices(Held);

impl Deref for Devices {
    type Target = Topology<GpuNode>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// The registry, locked.
pub(crate) fn devices() -> Devices {
    Devices(lock())
}

/// [`TOPOLOGY`], held (counted: `crate::lockstat`).
type Held = lockstat::Counted<GlobalGuard<TOPOLOGY>>;

/// [`TOPOLOGY`]'s contention counts.
static STAT: LockStat = LockStat::new();

/// [`TOPOLOGY`], locked, counted.
fn lock() -> Held {
    STAT.lock(|| TOPOLOGY.lock())
}

/// [`TOPOLOGY`]'s contention, for debugfs: acquisitions that could wait,
/// and those that found it held.
pub(crate) fn contention() -> (u64, u64) {
    STAT.figures()
}

/// The registry, if it is not locked now (from reclaim: only try).
pub(crate) fn try_devices() -> Option<Devices> {
    TOPOLOGY.try_lock().map(|g| Devices(STAT.taken(g)))
}

/// The pools of every device, each counted (see [`PoolRef`]), without
/// allocating. From reclaim (`blocking` false) the topology lock is only
/// tried: `None` if busy.
pub(crate) fn pools(blocking: bool) -> Option<[Option<PoolRef>; MAX_DEVICES]> {
    let topo = if blocking { devices() } else { try_devices()? };
    Some(core::array::from_fn(|i| PoolRef::get_locked(&topo, i).ok()))
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
    pool: Option<Published>,
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

/// A device's pool as the registry publishes it, with the count of its
/// users.
struct Published {
    pool: Arc<VramPool>,
    lease: Arc<Lease>,
}

/// The count of the other devices working on a pool now ([`PoolRef`]):
/// the device waits for them (dropping its [`Publication`]) before it
/// shuts its pool down.
#[pin_data]
struct Lease {
    /// The users, plus [`CLOSING`] once the pool is withdrawn: then the
    /// last user to leave completes `idle`.
    users: Atomic<u64>,
    #[pin]
    idle: Completion,
}

/// The bit of [`Lease::users`] that says the pool is withdrawn.
const CLOSING: u64 = 1 << 63;

/// One user counted in a [`Lease`]; leaves when dropped.
struct Counted(Arc<Lease>);

impl Drop for Counted {
    fn drop(&mut self) {
        // One word with the withdrawal's mark: either the last user sees
        // it and completes, or the withdrawal sees no user.
        if self.0.users.fetch_sub(1, Full) == CLOSING + 1 {
            self.0.idle.complete_all();
        }
    }
}

/// A counted use of a device's memory, taken by index through the
/// topology: how one device works on another's memory pool (a prefetch to
/// a peer, a job whose preferred location is a peer). The device waits for
/// its users to let go before it shuts its pool down.
pub(crate) struct PoolRef {
    /// Dropped before `counted` (fields drop in order): once the device
    /// sees its last user leave, no user holds the pool, and the device's
    /// handle is the last one.
    pool: Arc<VramPool>,
    counted: Counted,
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
        let published = node.pool.as_ref().ok_or(ENODEV)?;
        // Under the topology lock, as a withdrawal unpublishes: counted
        // before the device can wait for its users.
        published.lease.users.add(1, Relaxed);
        Ok(Self {
            pool: published.pool.clone(),
            counted: Counted(published.lease.clone()),
        })
    }
}

impl PoolRef {
    /// Whether the device has withdrawn its pool (it is going away and
    /// waits for this user): long work on it should stop.
    pub(crate) fn withdrawn(&self) -> bool {
        self.counted.0.users.load(Relaxed) & CLOSING != 0
    }
}

impl Deref for PoolRef {
    type Target = VramPool;

    fn deref(&self) -> &Self::Target {
        &self.pool
    }
}

/// A device's pool published for other devices ([`publish`]): withdrawn
/// when dropped.
pub(crate) struct Publication {
    index: usize,
    lease: Arc<Lease>,
}

impl Drop for Publication {
    /// Takes the pool away from new users ([`PoolRef::get_locked`] fails
    /// with `ENODEV` from now on) and waits until the current ones let go
    /// (their work is bounded: a prefetch or a job).
    fn drop(&mut self) {
        let published = lock().get_mut(self.index).and_then(|node| node.pool.take());
        // Not the pool's last handle (the device has one): dropped with the
        // topology unlocked all the same.
        drop(published);
        if self.lease.users.fetch_add(CLOSING, Full) != 0 {
            self.lease.idle.wait_for_completion();
        }
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

/// Adds `node` to the registry, its P2P link to and from every other
/// device as `link(provider, client)` gives it: `ENOSPC` if the registry
/// is full.
pub(crate) fn join(
    node: GpuNode,
    link: impl Fn(&GpuNode, &GpuNode) -> P2pLink,
) -> Result<Membership> {
    let index = lock().insert(node, link)?;
    Ok(Membership(index))
}

impl Drop for Membership {
    fn drop(&mut self) {
        lock().remove(self.0);
    }
}

/// Makes `pool` the memory of device `index` (the caller's own membership)
/// for other devices ([`PoolRef`]), until the returned publication is
/// withdrawn.
pub(crate) fn publish(index: usize, pool: &Arc<VramPool>) -> Result<Publication> {
    let lease = Arc::pin_init(
        pin_init!(Lease {
            users: Atomic::new(0),
            idle <- Completion::new(),
        }),
        GFP_KERNEL,
    )?;
    if let Some(node) = lock().get_mut(index) {
        node.pool = Some(Published {
            pool: pool.clone(),
            lease: lease.clone(),
        });
    }
    Ok(Publication { index, lease })
}
