// SPDX-License-Identifier: GPL-2.0

//! One msvm GPU: a bound PCI device, its VRAM and its place in the topology.

use kernel::{device::Bound, num::casts::FromSafeCast, pci, prelude::*, sync::aref::ARef};

use crate::mm::{iomem::WcBar, pci as mmpci};
use crate::registry::{self, GpuNode, Membership, PciAddr, Publication};
use crate::vram::{OwnedPool, VramPool};

/// The kinds of device msvm drives, from the PCI id table
/// (`drm::driver::PCI_TABLE`).
pub(crate) struct DeviceKind {
    /// The BAR that exposes the device's memory.
    pub(crate) vram_bar: u32,
    /// A short name for logs.
    pub(crate) name: &'static str,
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
    _member: Membership,
}

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

    /// The generic device, for DMA mappings.
    pub(crate) fn device(&self) -> &kernel::device::Device<Bound> {
        self.pdev.as_ref()
    }

    /// Maps the VRAM of `pdev` and adds the device to the topology.
    pub(crate) fn new(pdev: &'a pci::Device<Bound>, kind: &DeviceKind) -> Result<Self> {
        let bar = WcBar::new(pdev, kind.vram_bar, c"msvm-vram")?;
        let len = {
            let bar = bar.access(pdev.as_ref())?;
            vram_selftest(bar).inspect_err(|e| {
                dev_err!(
                    pdev.as_ref(),
                    "VRAM (BAR{}) does not hold data: {e:?}\n",
                    kind.vram_bar
                )
            })?;
            bar.len()
        };
        let pci = PciAddr::of(pdev);
        let node = GpuNode::new(ARef::from(&**pdev), pci, u64::from_safe_cast(len));
        let member = registry::join(node, |provider, client| {
            mmpci::p2pdma_distance(&provider.pdev, &client.pdev)
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
            len >> 20,
            kind.vram_bar,
            chunk_size() >> 20
        );
        let vram = VramPool::create(bar, chunk_size(), group, index, &crate::migrate::Migrations)?;
        let publication = registry::publish(index, &vram)?;
        Ok(Self {
            index,
            pdev,
            vram,
            publication: Some(publication),
            _member: member,
        })
    }
}

impl Drop for Gpu<'_> {
    fn drop(&mut self) {
        // No new users from other devices; then wait for the current ones
        // (their work is bounded: a prefetch or a job) before the pool's
        // shutdown sends every page to system RAM.
        drop(self.publication.take());
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
