// SPDX-License-Identifier: GPL-2.0

//! The switch's table (`DIR/ports`): one slot per downstream port, in a
//! file every device behind the switch maps shared, each writing its own
//! port's slot and reading its peers'.
//!
//! The file is [`SIZE`] bytes of little-endian 64-bit words: a header
//! (`MAGIC`, then the next generation to give out) and, from byte 64,
//! [`PORTS`] slots of 64 bytes: a sequence word, then the generation of the
//! port's VRAM file (0: no device), BAR2's bus address, its length and
//! whether it decodes ([`Window`]). A slot is a seqlock: a writer makes the
//! sequence odd (a compare-and-swap from the even value it read, so that
//! two writers never interleave), writes the fields and makes it even
//! again; a reader takes the fields only between two equal even reads of
//! the sequence. Every access is a sequentially consistent atomic on the
//! shared mapping.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::Ordering::SeqCst;

use crate::mem::Mmap;
use crate::Error;

/// Downstream ports of a switch: a device's port is `0..PORTS`.
pub const PORTS: usize = 16;

/// Bytes of the table file.
pub const SIZE: u64 = 4096;

/// The header's first word: "MSVMSW01".
const MAGIC: u64 = u64::from_le_bytes(*b"MSVMSW01");
/// The header's word that counts the generations given out.
const NEXT_GEN: u64 = 8;
/// Where the slots start, and the bytes of each.
const SLOTS: u64 = 64;
const SLOT: u64 = 64;

/// A slot's words, by offset in it.
mod field {
    pub const SEQ: u64 = 0;
    pub const GEN: u64 = 8;
    pub const BASE: u64 = 16;
    pub const LEN: u64 = 24;
    pub const DECODING: u64 = 32;
}

/// How often a reader or writer retries a slot whose writer is busy
/// before it gives up (a reader: the port is taken as not decoding) or
/// goes ahead (a writer: the one before it died half way).
const SPINS: u32 = 1 << 20;

/// A port's memory window, as its slot says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// The generation of the port's VRAM file: a new one for every device
    /// that takes the port; 0, no device.
    pub gen: u64,
    /// BAR2's bus address.
    pub base: u64,
    /// BAR2's length: the VRAM's size.
    pub len: u64,
    /// The device decodes the window: memory space enabled and BAR2
    /// placed.
    pub decoding: bool,
}

impl Window {
    /// Whether the window decodes any of `[addr, addr + n)` (a window that
    /// would wrap past 2^64 decodes nothing).
    pub fn overlaps(&self, addr: u64, n: usize) -> bool {
        let (Some(end), Some(last)) = (self.base.checked_add(self.len), addr.checked_add(n as u64))
        else {
            return false;
        };
        self.decoding && self.gen != 0 && addr < end && last > self.base
    }

    /// Whether the whole of `[addr, addr + n)` lies in the window while it
    /// decodes (a window that would wrap past 2^64 holds nothing).
    pub fn holds(&self, addr: u64, n: usize) -> bool {
        let (Some(end), Some(last)) = (self.base.checked_add(self.len), addr.checked_add(n as u64))
        else {
            return false;
        };
        self.decoding && self.gen != 0 && addr >= self.base && last <= end
    }
}

/// The table, mapped.
pub struct Table {
    map: Mmap,
}

impl Table {
    /// Opens `dir/ports`, creating the directory and the table if they do
    /// not exist yet (the first device of the switch does; devices that
    /// start together may both create and size it, which is the same).
    pub fn open(dir: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(Error::Io)?;
        // std opens with O_CLOEXEC: the table is no child's.
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join("ports"))
            .map_err(Error::Io)?;
        let len = f.metadata().map_err(Error::Io)?.len();
        if len == 0 {
            f.set_len(SIZE).map_err(Error::Io)?;
        } else if len != SIZE {
            return Err(Error::Malformed("not a switch's table: its size"));
        }
        let map = Mmap::new(&f, 0, SIZE as usize)?;
        let magic = map.atomic_u64(0)?;
        match magic.compare_exchange(0, MAGIC, SeqCst, SeqCst) {
            Ok(_) => {}
            Err(m) if m == MAGIC => {}
            Err(_) => return Err(Error::Malformed("not a switch's table: its magic")),
        }
        Ok(Self { map })
    }

    /// A generation no device of the switch had: 1, 2, and so on.
    pub fn new_gen(&self) -> Result<u64, Error> {
        Ok(self.map.atomic_u64(NEXT_GEN)?.fetch_add(1, SeqCst) + 1)
    }

    fn word(&self, port: usize, f: u64) -> u64 {
        debug_assert!(port < PORTS);
        // In the file: the offsets are below `SIZE` and 8-byte aligned.
        self.map
            .atomic_u64(SLOTS + SLOT * port as u64 + f)
            .map_or(0, |w| w.load(SeqCst))
    }

    fn set(&self, port: usize, f: u64, v: u64) {
        if let Ok(w) = self.map.atomic_u64(SLOTS + SLOT * port as u64 + f) {
            w.store(v, SeqCst);
        }
    }

    /// The sequence word of `port`'s slot: it changes with every write of
    /// the slot.
    pub fn seq(&self, port: usize) -> u64 {
        self.word(port, field::SEQ)
    }

    /// `port`'s window, with the sequence it was read at; `None` if a
    /// writer stayed busy in it.
    pub fn read(&self, port: usize) -> Option<(u64, Window)> {
        for _ in 0..SPINS {
            let seq = self.seq(port);
            if seq % 2 == 0 {
                let w = Window {
                    gen: self.word(port, field::GEN),
                    base: self.word(port, field::BASE),
                    len: self.word(port, field::LEN),
                    decoding: self.word(port, field::DECODING) != 0,
                };
                if self.seq(port) == seq {
                    return Some((seq, w));
                }
            }
            std::hint::spin_loop();
        }
        None
    }

    /// Changes `port`'s window: `f` gets it as it is, with no other writer
    /// in the slot and readers kept out, and returns whether it changed
    /// it (the slot is written then). Returns what `f` returned.
    pub fn update(&self, port: usize, f: impl FnOnce(&mut Window) -> bool) -> bool {
        let Ok(seq) = self.map.atomic_u64(SLOTS + SLOT * port as u64) else {
            return false;
        };
        let mut s = seq.load(SeqCst);
        for _ in 0..SPINS {
            if s % 2 == 0 {
                match seq.compare_exchange(s, s + 1, SeqCst, SeqCst) {
                    Ok(_) => break,
                    Err(now) => s = now,
                }
            } else {
                std::hint::spin_loop();
                s = seq.load(SeqCst);
            }
        }
        // Odd: ours, or (after `SPINS`) a writer's that died in it, which
        // this write takes over.
        let locked = s | 1;
        seq.store(locked, SeqCst);
        let mut w = Window {
            gen: self.word(port, field::GEN),
            base: self.word(port, field::BASE),
            len: self.word(port, field::LEN),
            decoding: self.word(port, field::DECODING) != 0,
        };
        let changed = f(&mut w);
        if changed {
            self.set(port, field::GEN, w.gen);
            self.set(port, field::BASE, w.base);
            self.set(port, field::LEN, w.len);
            self.set(port, field::DECODING, u64::from(w.decoding));
        }
        seq.store(locked + 1, SeqCst);
        changed
    }
}
