// SPDX-License-Identifier: GPL-2.0

//! Devices behind one switch: a switch directory of their own, no DMA
//! space (an access the switch does not route is refused, touching
//! nothing), configuration written as QEMU forwards the guest's.

use super::*;
use crate::device::{region, Device};
use crate::dma::{prot, NoRemote, Remote};
use crate::regs::{DMA_DIRECT, DMA_REMOTE, DMA_SWITCH};

/// A switch directory, removed at the end of the test.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("msvm-switch-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Self(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const VRAM: u64 = 2 << 20;
/// Where the tests place BAR2s.
const BASE: u64 = 0x80_0000_0000;

fn device(dir: &Dir, port: usize) -> Device {
    let d = Device::behind_switch(VRAM, &dir.0, port).unwrap();
    // Bus mastering on, memory space off: it reaches its peers, and
    // decodes nothing yet.
    d.region_write(region::CONFIG, 4, &[0x04, 0]).unwrap();
    d
}

/// Places `d`'s BAR2 at `base` as the guest does (the BAR, then the
/// command register's memory bit, `memory`), bus mastering kept on.
fn place(d: &Device, base: u64, memory: bool) {
    d.region_write(region::CONFIG, 0x18, &(base as u32 | 0xc).to_le_bytes())
        .unwrap();
    d.region_write(region::CONFIG, 0x1c, &((base >> 32) as u32).to_le_bytes())
        .unwrap();
    let cmd = if memory { 0x06 } else { 0x04 };
    d.region_write(region::CONFIG, 4, &[cmd, 0]).unwrap();
}

fn vram(d: &Device, off: u64, n: usize) -> Vec<u8> {
    let mut b = vec![0; n];
    d.region_read(region::BAR2, off, &mut b).unwrap();
    b
}

#[test]
fn a_sibling_window_is_reached_inside_the_switch() {
    let dir = Dir::new("sibling");
    let a = device(&dir, 0);
    let b = device(&dir, 1);
    place(&b, BASE, true);
    a.dma_write(BASE + 0x1000, b"peer", &NoRemote).unwrap();
    assert_eq!(vram(&b, 0x1000, 4), b"peer");
    b.region_write(region::BAR2, VRAM - 8, &7u64.to_le_bytes())
        .unwrap();
    let mut got = [0; 8];
    a.dma_read(BASE + VRAM - 8, &mut got, &NoRemote).unwrap();
    assert_eq!(u64::from_le_bytes(got), 7);
    // Atomics route too: a locked add on the peer's VRAM.
    a.dma_add(BASE + VRAM - 8, 5).unwrap();
    assert_eq!(vram(&b, VRAM - 8, 8), 12u64.to_le_bytes());
    let c = a.dma_counts();
    assert_eq!((c.switch_bytes, c.direct_bytes, c.remote_bytes), (20, 0, 0));
    assert_eq!(c.refused, 0);
    // Not B's traffic: it made none.
    assert_eq!(b.dma_counts().switch_bytes, 0);
    // Bus mastering is still the device's: without it, nothing.
    a.region_write(region::CONFIG, 4, &[0x00, 0]).unwrap();
    assert!(matches!(
        a.dma_write(BASE, b"x", &NoRemote),
        Err(Error::NoBusMaster)
    ));
    assert_eq!(vram(&b, 0, 1), [0]);
}

#[test]
fn what_no_sibling_decodes_goes_upstream() {
    let dir = Dir::new("upstream");
    let a = device(&dir, 0);
    let b = device(&dir, 1);
    place(&a, BASE, true);
    place(&b, BASE + VRAM, true);
    let refused = |addr: u64, n: usize| {
        let before = a.dma_counts();
        let r = a.dma_write(addr, &vec![0xee; n], &NoRemote);
        assert!(matches!(r, Err(Error::Unmapped(_))), "{addr:#x}: {r:?}");
        let after = a.dma_counts();
        assert_eq!(after.refused, before.refused + 1);
        assert_eq!(after.switch_bytes, before.switch_bytes);
    };
    // Its own window: a device's request for its own BAR is not the
    // switch's to turn back.
    refused(BASE, 8);
    // Over the sibling window's first edge: the piece below it goes
    // upstream (refused) first, nothing reaches the sibling.
    refused(BASE + VRAM - 4, 8);
    // Over its last edge: as a device's requests go, 4 KiB pieces at most
    // (none crosses a 4 KiB boundary); the sibling's piece is routed, the
    // rest goes upstream (refused).
    let before = a.dma_counts();
    assert!(a
        .dma_write(BASE + 2 * VRAM - 4, &[0xee; 8], &NoRemote)
        .is_err());
    let after = a.dma_counts();
    assert_eq!(after.switch_bytes - before.switch_bytes, 4);
    assert_eq!(after.refused, before.refused + 1);
    assert_eq!(vram(&b, VRAM - 4, 4), [0xee; 4]);
    b.region_write(region::BAR2, VRAM - 4, &[0; 4]).unwrap();
    // In no window.
    refused(BASE + 2 * VRAM, 8);
    refused(0x1000, 8);
    // The sibling's memory space off.
    place(&b, BASE + VRAM, false);
    refused(BASE + VRAM, 8);
    assert!(vram(&a, 0, 8).iter().all(|&x| x == 0));
    assert!(vram(&b, 0, 8).iter().all(|&x| x == 0));
    assert!(vram(&b, VRAM - 4, 4).iter().all(|&x| x == 0));
    // An access the switch does not route goes on to the DMA space as
    // before: there, QEMU serves it.
    a.dma().map(BASE + VRAM, VRAM, prot::READ, None).unwrap();
    struct Fives;
    impl Remote for Fives {
        fn dma_read(&self, _: u64, b: &mut [u8]) -> Result<(), Error> {
            b.fill(5);
            Ok(())
        }
        fn dma_write(&self, _: u64, _: &[u8]) -> Result<(), Error> {
            Ok(())
        }
    }
    let mut got = [0; 4];
    a.dma_read(BASE + VRAM, &mut got, &Fives).unwrap();
    assert_eq!(got, [5; 4]);
    // Decoding again: the switch takes it first.
    place(&b, BASE + VRAM, true);
    a.dma_read(BASE + VRAM, &mut got, &Fives).unwrap();
    assert_eq!(got, [0; 4]);
    let c = a.dma_counts();
    // The 4 bytes routed over the window's last edge above, and these.
    assert_eq!((c.remote_bytes, c.switch_bytes), (4, 8));
}

#[test]
fn a_moved_bar_and_a_new_device_on_the_port_are_followed() {
    let dir = Dir::new("follow");
    let a = device(&dir, 3);
    let b = device(&dir, 15);
    place(&b, BASE, true);
    a.dma_write(BASE, b"one", &NoRemote).unwrap();
    // Moved (memory off while the BAR changes, as Linux does).
    place(&b, BASE, false);
    place(&b, BASE + (1 << 30), true);
    assert!(a.dma_write(BASE, b"two", &NoRemote).is_err());
    a.dma_write(BASE + (1 << 30) + 8, b"two", &NoRemote)
        .unwrap();
    assert_eq!(vram(&b, 0, 3), b"one");
    assert_eq!(vram(&b, 8, 3), b"two");
    // Gone: its slot cleared and its file removed; nothing routed.
    let old = File::options()
        .read(true)
        .write(true)
        .open(dir.0.join("port15.vram"))
        .unwrap();
    let old = Mmap::new(&old, 0, VRAM as usize).unwrap();
    drop(b);
    assert!(!dir.0.join("port15.vram").exists());
    assert!(a.dma_write(BASE + (1 << 30), b"xxx", &NoRemote).is_err());
    // A new card on the port, at the same address: a new file, a new
    // generation; A reaches it, not the mapping it had of the old one.
    let c = device(&dir, 15);
    place(&c, BASE + (1 << 30), true);
    a.dma_write(BASE + (1 << 30), b"new", &NoRemote).unwrap();
    assert_eq!(vram(&c, 0, 3), b"new");
    let mut b = [0; 3];
    old.read(0, &mut b).unwrap();
    assert_eq!(&b, b"one");
    // And it reaches A the same way.
    place(&a, BASE, true);
    c.dma_write(BASE + 16, b"back", &NoRemote).unwrap();
    assert_eq!(vram(&a, 16, 4), b"back");
}

#[test]
fn the_table_gives_generations_and_refuses_what_is_not_one() {
    let dir = Dir::new("table");
    let t = table::Table::open(&dir.0).unwrap();
    let (a, _fd) = Port::new(&dir.0, 2, VRAM).unwrap();
    let (_, w) = t.read(2).unwrap();
    assert_eq!((w.gen, w.len, w.decoding), (1, VRAM, false));
    // Only a placed BAR with memory on decodes; writes that change
    // nothing leave the slot alone.
    a.publish(0, true);
    assert!(!t.read(2).unwrap().1.decoding);
    a.publish(!0xf, true);
    assert!(!t.read(2).unwrap().1.decoding, "a window past 2^64");
    a.publish(BASE, true);
    let (seq, w) = t.read(2).unwrap();
    assert!(w.decoding && w.base == BASE);
    a.publish(BASE, true);
    assert_eq!(t.seq(2), seq);
    assert!(w.holds(BASE, VRAM as usize) && !w.holds(BASE, VRAM as usize + 1));
    // A second device of the switch: the next generation.
    let (b, _fd) = Port::new(&dir.0, 3, VRAM).unwrap();
    assert_eq!(t.read(3).unwrap().1.gen, 2);
    assert!(b.route(BASE, 8).is_some() && a.route(BASE, 8).is_none());
    drop(a);
    assert_eq!(t.read(2).unwrap().1, table::Window::default());
    assert!(b.route(BASE, 8).is_none());
    assert!(Port::new(&dir.0, PORTS, VRAM).is_err());
    // A file of another size or kind is not a table.
    let other = Dir::new("other");
    std::fs::create_dir_all(&other.0).unwrap();
    std::fs::write(other.0.join("ports"), b"not a table").unwrap();
    assert!(table::Table::open(&other.0).is_err());
    std::fs::write(other.0.join("ports"), vec![1; table::SIZE as usize]).unwrap();
    assert!(table::Table::open(&other.0).is_err());
}

#[test]
fn the_dma_counters_show_each_path_and_start_again_at_reset() {
    let dir = Dir::new("counters");
    let a = device(&dir, 0);
    let b = device(&dir, 1);
    place(&b, BASE, true);
    let ram = crate::mem::memfd("ram", 4096).unwrap();
    a.dma()
        .map(0x1000, 4096, prot::READ | prot::WRITE, Some((ram, 0)))
        .unwrap();
    a.dma().map(0x10_0000, 4096, prot::WRITE, None).unwrap();
    /// QEMU's side: accepts every write.
    struct Sink;
    impl Remote for Sink {
        fn dma_read(&self, _: u64, _: &mut [u8]) -> Result<(), Error> {
            Ok(())
        }
        fn dma_write(&self, _: u64, _: &[u8]) -> Result<(), Error> {
            Ok(())
        }
    }
    a.dma_write(0x1000, &[1; 16], &Sink).unwrap();
    a.dma_write(0x10_0000, &[2; 32], &Sink).unwrap();
    a.dma_write(BASE, &[3; 64], &Sink).unwrap();
    let reg = |off: u64| {
        let mut b = [0; 8];
        a.region_read(region::BAR0, off, &mut b).unwrap();
        u64::from_le_bytes(b)
    };
    assert_eq!(
        (reg(DMA_DIRECT), reg(DMA_REMOTE), reg(DMA_SWITCH)),
        (16, 32, 64)
    );
    let mut hi = [0; 4];
    a.region_read(region::BAR0, DMA_SWITCH + 4, &mut hi)
        .unwrap();
    assert_eq!(hi, [0; 4]);
    // Read-only.
    a.region_write(region::BAR0, DMA_SWITCH, &[0xff; 8])
        .unwrap();
    assert_eq!(reg(DMA_SWITCH), 64);
    // A reset starts them from 0; the connection's totals go on.
    a.reset().unwrap();
    assert_eq!(
        (reg(DMA_DIRECT), reg(DMA_REMOTE), reg(DMA_SWITCH)),
        (0, 0, 0)
    );
    a.dma_write(BASE, &[3; 8], &Sink).unwrap();
    assert_eq!(reg(DMA_SWITCH), 8);
    assert_eq!(a.dma_counts().switch_bytes, 72);
    // A device on a root port counts nothing through a switch.
    let alone = Device::new(VRAM).unwrap();
    alone.region_write(region::CONFIG, 4, &[0x04, 0]).unwrap();
    assert!(alone.dma_write(BASE, &[1], &Sink).is_err());
    assert_eq!(alone.dma_counts().switch_bytes, 0);
}

/// A request over two siblings' adjacent windows reaches both, a 4 KiB
/// piece at a time (the copy engine's merged steps over two peers' pages).
#[test]
fn a_request_over_two_siblings_reaches_both() {
    let dir = Dir::new("adjacent");
    let a = device(&dir, 0);
    let b = device(&dir, 1);
    let c = device(&dir, 2);
    place(&b, BASE, true);
    place(&c, BASE + VRAM, true);
    let data: Vec<u8> = (0..8192u32).map(|i| i as u8).collect();
    a.dma_write(BASE + VRAM - 4096, &data, &NoRemote).unwrap();
    assert_eq!(vram(&b, VRAM - 4096, 4096), &data[..4096]);
    assert_eq!(vram(&c, 0, 4096), &data[4096..]);
    let mut got = vec![0; 8192];
    a.dma_read(BASE + VRAM - 4096, &mut got, &NoRemote).unwrap();
    assert_eq!(got, data);
    assert_eq!(a.dma_counts().switch_bytes, 2 * 8192);
}
