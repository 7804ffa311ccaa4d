// SPDX-License-Identifier: GPL-2.0

//! One msvm GPU: a bound PCI device, its VRAM and its place in the topology.

use kernel::{
    device::Bound, num::casts::FromSafeCast, pci, prelude::*, str::CString, sync::aref::ARef,
};

use crate::fault::FaultHandler;
use crate::gpu::{
    hal::{CpuEngine, Hal},
    Engines,
};
use crate::mm::{
    cancel::Gone,
    devtables::Tables,
    iomem::WcBar,
    numa::Home,
    pci::{self as mmpci, MemBar},
};
use crate::registry::{self, GpuNode, Membership, PciAddr, Publication};
use crate::vram::{OwnedPool, VramPool};

/// The kinds of device msvm drives: those of the PCI id table
/// (`drm::driver::PCI_TABLE`), and [`GENERIC`].
pub(crate) struct DeviceKind {
    /// The BAR that exposes the device's memory; `None`: the largest
    /// prefetchable memory BAR ([`generic_bar`]).
    pub(crate) vram_bar: Option<u32>,
    /// A short name for logs.
    pub(crate) name: &'static str,
    /// Its hardware.
    pub(crate) hal: &'static dyn Hal,
}

/// A device bound at run time, by module parameter `generic_id` or by
/// `driver_override` (matched with no entry of the id table): its memory
/// is its largest prefetchable memory BAR, whatever the device is.
pub(crate) const GENERIC: DeviceKind = DeviceKind {
    vram_bar: None,
    name: "generic device",
    hal: &CpuEngine,
};

/// Why a generic device's memory BAR was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BarRefusal {
    /// The device has no memory BAR at all.
    NoMemory,
    /// Its largest memory BAR (no BAR is prefetchable) is not prefetchable:
    /// it may have side effects on reads, and is not mapped write-combined.
    NotPrefetchable(MemBar),
    /// Its largest prefetchable BAR holds less than one chunk.
    TooSmall(MemBar),
}

/// The memory BAR of a generic device, among its memory BARs `bars`: the
/// largest prefetchable one (the lowest numbered of equals), if it holds
/// `min` bytes (one chunk).
pub(crate) fn generic_bar(
    bars: impl Iterator<Item = MemBar> + Clone,
    min: u64,
) -> Result<MemBar, BarRefusal> {
    // The largest, the lowest numbered of equals.
    let largest = |a: &MemBar, b: &MemBar| a.len.cmp(&b.len).then(b.bar.cmp(&a.bar));
    match bars.clone().filter(|b| b.prefetchable).max_by(largest) {
        Some(b) if b.len >= min => Ok(b),
        Some(b) => Err(BarRefusal::TooSmall(b)),
        None => Err(bars
            .max_by(largest)
            .map_or(BarRefusal::NoMemory, BarRefusal::NotPrefetchable)),
    }
}

/// A bound msvm GPU. It is the DRM registration data of the device: the
/// ioctl handlers get it, and it lives until the device is unbound.
pub(crate) struct Gpu<'a> {
    /// msvm device index (also the topology index).
    pub(crate) index: usize,
    pdev: &'a pci::Device<Bound>,
    /// The device memory: its BAR window and its chunks. Shut down before
    /// the topology membership goes, after the DRM device is unplugged:
    /// every page goes to system RAM first.
    vram: OwnedPool,
    /// The pool, published for peers; withdrawn first when the device goes.
    publication: Option<Publication>,
    /// The fault handler of the device's engine.
    faults: FaultHandler,
    /// Dropped once the DRM device is unplugged and the pool withdrawn
    /// from its peers, before the pool's shutdown: the other devices'
    /// ioctls stop for this one's unplug only, not for its eviction.
    departure: Option<Gone>,
    _member: Membership,
    /// The device's engines (msvm-gpu's), stopped after the pool's
    /// shutdown, which uses them to send pages home.
    _engines: Option<Engines<'a>>,
}

/// The most device memory msvm uses of one device: the tables sized by it
/// (chunk slots, block records) stay within what `kmalloc` gives.
const MAX_VRAM: usize = 64 << 30;

/// Bytes per chunk of device memory (module parameter `chunk_mib`).
fn chunk_size() -> usize {
    let mib = crate::module_parameters::chunk_mib.value().clamp(2, 1024);
    usize::from_safe_cast(mib) * 1024 * 1024
}

impl<'a> Gpu<'a> {
    /// The device memory.
    pub(crate) fn vram(&self) -> &VramPool {
        &self.vram
    }

    /// The fault handler of the device's engine.
    pub(crate) fn faults(&self) -> &FaultHandler {
        &self.faults
    }

    /// The generic device, for DMA mappings.
    pub(crate) fn device(&self) -> &kernel::device::Device<Bound> {
        self.pdev.as_ref()
    }

    /// Maps the VRAM of `pdev` and adds the device to the topology;
    /// `departure` is dropped with the device's memory still there (see
    /// [`Gone`]).
    pub(crate) fn new(
        pdev: &'a pci::Device<Bound>,
        kind: &DeviceKind,
        departure: Gone,
    ) -> Result<Self> {
        let vram_bar = match kind.vram_bar {
            Some(b) => b,
            None => Self::generic_bar(pdev)?,
        };
        let bar_len = pdev.resource_len(vram_bar)?;
        let engines = kind.hal.start(pdev, bar_len)?;
        if bar_len > u64::from_safe_cast(MAX_VRAM) {
            dev_warn!(
                pdev.as_ref(),
                "BAR{vram_bar} holds {} GiB: msvm uses its first {} GiB\n",
                bar_len >> 30,
                MAX_VRAM >> 30
            );
        }
        let bar = WcBar::new(pdev, vram_bar, MAX_VRAM, c"msvm-vram")?;
        let len = {
            let bar = bar.access(pdev.as_ref())?;
            vram_selftest(bar).inspect_err(|e| {
                dev_err!(
                    pdev.as_ref(),
                    "VRAM (BAR{vram_bar}) does not hold data: {e:?}\n"
                )
            })?;
            bar.len()
        };
        let pci = PciAddr::of(pdev);
        let node = GpuNode::new(ARef::from(&**pdev), pci, u64::from_safe_cast(len));
        let member = registry::join(node, |provider, client| {
            mmpci::p2p_link(&provider.pdev, &client.pdev)
        })
        .inspect_err(|_| {
            dev_err!(
                pdev.as_ref(),
                "too many msvm devices (at most {})\n",
                crate::topology::MAX_DEVICES
            )
        })?;
        let index = member.index();
        let group = registry::devices().group(index).unwrap_or(index);
        {
            let topo = registry::devices();
            for peer in topo.peers(index) {
                let other = topo.get(peer.index).map(|n| n.pci);
                if let Some(o) = other {
                    dev_info!(
                        pdev.as_ref(),
                        "gpu{index} -> gpu{} ({o}): {}\n",
                        peer.index,
                        crate::topology::LinkText(&peer.link)
                    );
                }
            }
        }
        dev_info!(
            pdev.as_ref(),
            "gpu{index}: {} at {pci}, {} MiB VRAM (BAR{vram_bar}, write-combined), {} MiB chunks, owner group {group}\n",
            kind.name,
            len >> 20,
            chunk_size() >> 20
        );
        // The name DRM's own drivers give their VRAM in the dmem
        // controller (`drmm_cgroup_register_region`: `drm/<device>/<name>`).
        let region = CString::try_from_fmt(fmt!("drm/{pci}/vram"))?;
        let vram = VramPool::create(
            (bar, engines.as_ref().map(|e| e.hw().clone())),
            chunk_size(),
            group,
            index,
            Home::device(pdev.as_ref()),
            &crate::migrate::Migrations,
            &region,
            Tables::new(
                pdev.as_ref(),
                index,
                engines
                    .as_ref()
                    .map(|e| e.hw().device_tables())
                    .transpose()?,
            )?,
        )?;
        let publication = registry::publish(index, &vram)?;
        Ok(Self {
            index,
            pdev,
            vram,
            publication: Some(publication),
            faults: FaultHandler::new(index)?,
            departure: Some(departure),
            _member: member,
            _engines: engines,
        })
    }
}

impl Gpu<'_> {
    /// The memory BAR of a generic device ([`generic_bar`]); a refusal is
    /// logged, and fails the probe with `ENODEV`.
    fn generic_bar(pdev: &pci::Device<Bound>) -> Result<u32> {
        let min = u64::from_safe_cast(chunk_size());
        let dev = pdev.as_ref();
        match generic_bar(mmpci::mem_bars(pdev), min) {
            Ok(b) => Ok(b.bar),
            Err(BarRefusal::NoMemory) => {
                dev_err!(dev, "generic device: no memory BAR to use as VRAM\n");
                Err(ENODEV)
            }
            Err(BarRefusal::NotPrefetchable(b)) => {
                dev_err!(
                    dev,
                    "generic device: no prefetchable memory BAR (the largest, BAR{}, {} KiB, is not prefetchable): not usable as VRAM\n",
                    b.bar,
                    b.len >> 10
                );
                Err(ENODEV)
            }
            Err(BarRefusal::TooSmall(b)) => {
                dev_err!(
                    dev,
                    "generic device: BAR{} ({} KiB) is smaller than one chunk ({} MiB, module parameter chunk_mib): not usable as VRAM\n",
                    b.bar,
                    b.len >> 10,
                    min >> 20
                );
                Err(ENODEV)
            }
        }
    }
}

impl Drop for Gpu<'_> {
    fn drop(&mut self) {
        // No new users from other devices; then wait for the current ones
        // (their work is bounded: a prefetch or a job) before the pool's
        // shutdown sends every page to system RAM.
        drop(self.publication.take());
        // Its VMs' device page tables let go of their DMA and P2P mappings
        // now, before the pool's shutdown (the VMs may outlive the device:
        // their files stay open; a device-managed action would do it at
        // the unbind's end otherwise).
        self.vram.pt_tables().gone();
        // The DRM device is unplugged (the registration does it before it
        // drops this), and no peer uses the pool: the other devices' ioctls
        // go on from here, while the pool's shutdown, which may take long,
        // sends the pages home.
        drop(self.departure.take());
        // Then `vram`, dropped after this, shuts the pool down.
    }
}

/// Checks that the BAR really is memory: a pattern written at both ends of it
/// through the write-combined mapping reads back unchanged. Run at probe,
/// before anything lives in the VRAM.
fn vram_selftest(vram: &WcBar) -> Result {
    const LEN: usize = 256;
    let mut pattern = [0u8; LEN];
    let mut back = [0u8; LEN];
    for offset in [0, vram.len().saturating_sub(LEN)] {
        for (i, b) in pattern.iter_mut().enumerate() {
            // CAST: truncation intended: the pattern takes the low byte.
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

#[kunit_tests(msvm_device)]
mod tests {
    use super::*;

    fn bar(bar: u32, mib: u64, prefetchable: bool) -> MemBar {
        MemBar {
            bar,
            len: mib << 20,
            prefetchable,
        }
    }

    #[test]
    fn generic_takes_the_largest_prefetchable_bar() {
        // NVMe with a controller memory buffer: registers, CMB, MSI-X.
        let bars = [bar(0, 1, false), bar(2, 64, true), bar(4, 1, false)];
        assert_eq!(generic_bar(bars.into_iter(), 64 << 20), Ok(bars[1]));
        // A larger non-prefetchable BAR does not count; of equals, the first.
        let bars = [bar(0, 256, false), bar(2, 128, true), bar(4, 128, true)];
        assert_eq!(generic_bar(bars.into_iter(), 64 << 20), Ok(bars[1]));
    }

    #[test]
    fn generic_refuses_small_or_non_prefetchable_memory() {
        let bars = [bar(0, 1, false), bar(2, 16, true)];
        assert_eq!(
            generic_bar(bars.into_iter(), 64 << 20),
            Err(BarRefusal::TooSmall(bars[1]))
        );
        let bars = [bar(0, 1, false), bar(4, 2, false)];
        assert_eq!(
            generic_bar(bars.into_iter(), 64 << 20),
            Err(BarRefusal::NotPrefetchable(bars[1]))
        );
        assert_eq!(
            generic_bar([].into_iter(), 64 << 20),
            Err(BarRefusal::NoMemory)
        );
    }
}
