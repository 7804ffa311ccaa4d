// SPDX-License-Identifier: GPL-2.0

//! A PCIe switch's peer-to-peer routing (Documentation/hardware.rst,
//! "Peer-to-peer inside a switch"): devices started with the same switch
//! directory sit behind one switch whose downstream ports redirect nothing
//! upstream (no ACS), so a request whose whole range falls in a sibling
//! port's memory window goes to that sibling, never to the root complex or
//! an IOMMU.
//!
//! Each device on the switch is a [`Port`]: its VRAM is the file
//! `DIR/portN.vram` (what QEMU maps for BAR2, as it would map the memfd of
//! a device on a root port), and it keeps its slot of the switch's
//! [`table`] (`DIR/ports`) up to date: BAR2's bus address and length, and
//! whether it decodes them, as its configuration space says. A device's
//! DMA asks its port first ([`Port::route`]); the port finds the sibling
//! whose window holds the access and reaches that sibling's VRAM file
//! directly, through a mapping it keeps per port and generation.
//!
//! A new device on a port is a new generation: it clears the slot, then
//! replaces the file, then publishes its generation. A peer maps a port's
//! file only between two reads of the slot that find it unchanged, so the
//! file it mapped is the one of the generation it read; a mapping of an
//! earlier generation is never used.

use std::fs::{File, OpenOptions};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::mem::Mmap;
use crate::Error;

pub mod table;

pub use table::PORTS;
use table::{Table, Window};

/// A peer's VRAM, mapped, and the generation it is of.
struct Peer {
    gen: u64,
    map: Arc<Mmap>,
}

/// A device's downstream port of a switch.
///
/// # Invariants
///
/// `port < PORTS`; `gen` is the generation this port published in its slot
/// for `DIR/portN.vram` of `len` bytes, created by [`Port::new`].
pub struct Port {
    dir: PathBuf,
    port: usize,
    gen: u64,
    len: u64,
    table: Table,
    /// The peers' VRAM mapped so far, by port.
    peers: Mutex<Vec<Option<Peer>>>,
    /// Bytes routed to a peer.
    bytes: AtomicU64,
}

/// The path of `port`'s VRAM file in `dir`.
fn vram_path(dir: &Path, port: usize) -> PathBuf {
    dir.join(format!("port{port}.vram"))
}

impl Port {
    /// Takes port `port` of the switch in `dir` (created if need be) for a
    /// device with `len` bytes of VRAM: clears the port's slot, replaces
    /// its VRAM file with a new one of `len` bytes (zero), and publishes a
    /// new generation, not decoding. Returns the port and the VRAM file.
    pub fn new(dir: &Path, port: usize, len: u64) -> Result<(Self, OwnedFd), Error> {
        if port >= PORTS {
            return Err(Error::Malformed("switch port: 0 to 15"));
        }
        let table = Table::open(dir)?;
        // Cleared before the file goes: a peer that maps the file while it
        // is replaced sees the slot change, and drops what it mapped.
        table.update(port, |w| {
            *w = Window::default();
            true
        });
        let path = vram_path(dir, port);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::Io(e)),
            _ => {}
        }
        // std opens with O_CLOEXEC: the file reaches QEMU only as BAR2's fd.
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(Error::Io)?;
        f.set_len(len).map_err(Error::Io)?;
        let gen = table.new_gen()?;
        table.update(port, |w| {
            *w = Window {
                gen,
                base: 0,
                len,
                decoding: false,
            };
            true
        });
        let peers = (0..PORTS).map(|_| None).collect();
        // INVARIANT: `port < PORTS` (checked), `gen` just published for the
        // file just made.
        let me = Self {
            dir: dir.to_owned(),
            port,
            gen,
            len,
            table,
            peers: Mutex::new(peers),
            bytes: AtomicU64::new(0),
        };
        Ok((me, f.into()))
    }

    /// Bytes routed to peers so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Publishes BAR2 at bus address `base`, and whether the configuration
    /// space lets the device decode memory (`memory`): it decodes its
    /// window when memory is on and BAR2 is placed (not 0, and not
    /// wrapping past 2^64). Writes the slot only if that changed, and only
    /// while the slot is still this device's (a device that took the port
    /// over has it).
    pub fn publish(&self, base: u64, memory: bool) {
        let decoding = memory && base != 0 && base.checked_add(self.len).is_some();
        // Nothing to write: the slot says so already, or is no longer ours.
        let settled = |w: &Window| w.gen != self.gen || (w.base, w.decoding) == (base, decoding);
        if self.table.read(self.port).is_some_and(|(_, w)| settled(&w)) {
            return;
        }
        self.table.update(self.port, |w| {
            if settled(w) {
                return false;
            }
            w.base = base;
            w.decoding = decoding;
            true
        });
    }

    /// Does `f(peer's VRAM, offset in it)` if `[addr, addr + n)` reaches a
    /// sibling through the switch ([`Port::route`]), counting the bytes if
    /// it succeeds; `None` if the request goes upstream.
    pub fn reach(
        &self,
        addr: u64,
        n: usize,
        f: impl FnOnce(&Mmap, u64) -> Result<(), Error>,
    ) -> Option<Result<(), Error>> {
        let (map, off) = self.route(addr, n)?;
        let r = f(&map, off);
        if r.is_ok() {
            self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        Some(r)
    }

    /// Whether any of `[addr, addr + n)` lies in another port's decoding
    /// window: a request over it goes piece by piece (`Device`'s bus).
    pub fn touches(&self, addr: u64, n: usize) -> bool {
        (0..PORTS)
            .filter(|&p| p != self.port)
            .filter_map(|p| self.table.read(p))
            .any(|(_, w)| w.overlaps(addr, n))
    }

    /// The sibling memory `[addr, addr + n)` reaches through the switch:
    /// the mapping of the peer's VRAM and the offset in it, when the whole
    /// range lies in one decoding window of another port. `None`: the
    /// request goes upstream (the DMA space) as any other.
    pub fn route(&self, addr: u64, n: usize) -> Option<(Arc<Mmap>, u64)> {
        let (port, seq, w) = (0..PORTS)
            .filter(|&p| p != self.port)
            .filter_map(|p| self.table.read(p).map(|(seq, w)| (p, seq, w)))
            .find(|(_, _, w)| w.holds(addr, n))?;
        let mut peers = self.peers.lock().ok()?;
        let slot = &mut peers[port];
        let map = match slot {
            Some(p) if p.gen == w.gen => p.map.clone(),
            _ => {
                *slot = None;
                let map = Arc::new(self.map_peer(port, &w)?);
                // The file may have been replaced since the slot was read:
                // then the slot changed too, and this mapping is not used.
                if self.table.seq(port) != seq {
                    return None;
                }
                *slot = Some(Peer {
                    gen: w.gen,
                    map: map.clone(),
                });
                map
            }
        };
        Some((map, addr - w.base))
    }

    /// Maps `port`'s VRAM file for window `w`; `None` if it cannot (gone,
    /// or shorter than the window).
    fn map_peer(&self, port: usize, w: &Window) -> Option<Mmap> {
        let f = File::options()
            .read(true)
            .write(true)
            .open(vram_path(&self.dir, port))
            .ok()?;
        if f.metadata().ok()?.len() < w.len {
            return None;
        }
        Mmap::new(&f, 0, usize::try_from(w.len).ok()?).ok()
    }
}

impl Drop for Port {
    /// Clears the slot and removes the VRAM file, if the port is still
    /// this device's; under the slot's lock, so that a device taking the
    /// port over makes its file after this one is gone.
    fn drop(&mut self) {
        let path = vram_path(&self.dir, self.port);
        self.table.update(self.port, |w| {
            if w.gen != self.gen {
                return false;
            }
            let _ = std::fs::remove_file(&path);
            *w = Window::default();
            true
        });
    }
}

#[cfg(test)]
mod tests;
