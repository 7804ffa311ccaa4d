// SPDX-License-Identifier: GPL-2.0

//! The copy engine against a device with memfd-backed "guest RAM".

use super::*;
use crate::device::{region, Device};
use crate::dma::{prot, NoRemote};
use crate::mem::{memfd, Mmap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// QEMU's side, for a remote range whose reads take 300 ms.
struct Slow;

impl Remote for Slow {
    fn dma_read(&self, _: u64, b: &mut [u8]) -> Result<(), Error> {
        std::thread::sleep(Duration::from_millis(300));
        b.fill(0xab);
        Ok(())
    }
    fn dma_write(&self, _: u64, _: &[u8]) -> Result<(), Error> {
        Ok(())
    }
}

/// A device with 1 MiB of "guest RAM" at DMA address 0x10_0000, its
/// ring at 0x10_0000 (16 entries), its fence at 0x10_1000, a data
/// page at 0x10_2000, 1 MiB that QEMU serves at [`REMOTE`], and its
/// engine running.
struct Rig {
    dev: Arc<Device>,
    ram: Mmap,
    engine: Option<std::thread::JoinHandle<Result<(), Error>>>,
    tail: u32,
}

const RAM: u64 = 0x10_0000;
const FENCE: u64 = RAM + 0x1000;
const DATA: u64 = RAM + 0x2000;
const REMOTE: u64 = 0x8000_0000;

impl Rig {
    fn new() -> Self {
        Self::with_remote(&NoRemote)
    }

    fn with_remote(remote: &'static (dyn Remote + Sync)) -> Self {
        let dev = Arc::new(Device::new(2 << 20).unwrap());
        let fd = memfd("ram", 1 << 20).unwrap();
        let ram = Mmap::new(&fd, 0, 1 << 20).unwrap();
        dev.dma()
            .map(RAM, 1 << 20, prot::READ | prot::WRITE, Some((fd, 0)))
            .unwrap();
        dev.dma()
            .map(REMOTE, 1 << 20, prot::READ | prot::WRITE, None)
            .unwrap();
        // Memory space and bus mastering on.
        dev.region_write(region::CONFIG, 4, &[0x06, 0]).unwrap();
        let w = |r: u64, v: u32| dev.region_write(region::BAR0, r, &v.to_le_bytes()).unwrap();
        w(reg::RING_LO, RAM as u32);
        w(reg::RING_HI, 0);
        w(reg::RING_SIZE, 16);
        w(reg::FENCE_LO, FENCE as u32);
        w(reg::FENCE_HI, 0);
        let d = dev.clone();
        let engine = Some(std::thread::spawn(move || d.run_copy_engine(remote)));
        Self {
            dev,
            ram,
            engine,
            tail: 0,
        }
    }

    fn set(&self, r: u64, v: u32) {
        self.dev
            .region_write(region::BAR0, r, &v.to_le_bytes())
            .unwrap();
    }

    fn vram_word(&self) -> u64 {
        let mut b = [0; 8];
        self.dev.region_read(region::BAR2, 0, &mut b).unwrap();
        u64::from_le_bytes(b)
    }

    fn reg(&self, r: u64) -> u32 {
        let mut b = [0; 4];
        self.dev.region_read(region::BAR0, r, &mut b).unwrap();
        u32::from_le_bytes(b)
    }

    /// Writes `c` at the tail and rings the doorbell.
    fn submit(&mut self, c: Command) {
        self.ram
            .write(u64::from(self.tail) * 64, &c.encode())
            .unwrap();
        self.tail = (self.tail + 1) % 16;
        let t = self.tail.to_le_bytes();
        self.dev.region_write(region::BAR0, reg::TAIL, &t).unwrap();
    }

    fn fence(&self) -> u64 {
        let mut b = [0; 8];
        self.ram.read(FENCE - RAM, &mut b).unwrap();
        u64::from_le_bytes(b)
    }

    /// Waits until the engine is idle or halted.
    fn settle(&self) {
        let t = Instant::now();
        while self.reg(reg::STATUS) & (status::IDLE | status::HALTED) == 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "engine stuck");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.dev.stop();
        if let Some(e) = self.engine.take() {
            e.join().unwrap().unwrap();
        }
    }
}

#[test]
fn copies_and_fills_between_vram_and_dma_addresses_and_fences_each() {
    let mut r = Rig::new();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    r.ram.write(DATA - RAM, &data[..8192]).unwrap();
    // System to VRAM, VRAM to VRAM (across a 64 KiB step), VRAM back
    // to system elsewhere, then a fill.
    r.submit(Command {
        opcode: op::COPY,
        flags: flag::DST_VRAM,
        seqno: 1,
        src: DATA,
        dst: 0x1000,
        len: 8192,
    });
    r.dev.region_write(region::BAR2, 0x10_0000, &data).unwrap();
    r.submit(Command {
        opcode: op::COPY,
        flags: flag::SRC_VRAM | flag::DST_VRAM,
        seqno: 2,
        src: 0x10_0000,
        dst: 0x18_0000,
        len: data.len() as u64,
    });
    r.submit(Command {
        opcode: op::COPY,
        flags: flag::SRC_VRAM,
        seqno: 3,
        src: 0x1000,
        dst: DATA + 0x4000,
        len: 8192,
    });
    r.submit(Command {
        opcode: op::FILL,
        flags: 0,
        seqno: 4,
        src: 0x1122_3344_5566_7788,
        dst: DATA + 0x8000,
        len: 24,
    });
    r.settle();
    assert_eq!(r.fence(), 4);
    assert_eq!(r.reg(reg::DONE_LO), 4);
    let mut got = vec![0; data.len()];
    r.dev
        .region_read(region::BAR2, 0x18_0000, &mut got)
        .unwrap();
    assert_eq!(got, data);
    let mut got = vec![0; 8192];
    r.ram.read(DATA - RAM + 0x4000, &mut got).unwrap();
    assert_eq!(got, &data[..8192]);
    let mut fill = [0; 24];
    r.ram.read(DATA - RAM + 0x8000, &mut fill).unwrap();
    assert_eq!(fill[..8], 0x1122_3344_5566_7788u64.to_le_bytes());
    assert_eq!(fill[16..], fill[..8]);
}

#[test]
fn a_fault_halts_the_engine_unfenced_until_reset() {
    let mut r = Rig::new();
    r.submit(Command {
        opcode: op::NOP,
        flags: 0,
        seqno: 1,
        ..Default::default()
    });
    // A source never mapped for the device.
    r.submit(Command {
        opcode: op::COPY,
        flags: flag::DST_VRAM,
        seqno: 2,
        src: 0x4000_0000,
        dst: 0,
        len: 4096,
    });
    r.submit(Command {
        opcode: op::NOP,
        flags: 0,
        seqno: 3,
        ..Default::default()
    });
    r.settle();
    assert_eq!(r.reg(reg::STATUS) & status::HALTED, status::HALTED);
    assert_eq!(r.reg(reg::ERROR), error::DMA_FAULT);
    assert_eq!(r.reg(reg::ERROR_SEQNO_LO), 2);
    assert_eq!(r.reg(reg::HEAD), 1, "halted at the failing entry");
    assert_eq!(r.fence(), 1, "nothing after the fault completed");
    assert_ne!(
        r.reg(crate::regs::IRQ_STATUS) & crate::regs::cause::ERROR,
        0
    );
    // A VRAM range past the end, after a reset.
    r.dev
        .region_write(region::BAR0, reg::CTRL, &CTRL_RESET.to_le_bytes())
        .unwrap();
    r.tail = 0;
    r.submit(Command {
        opcode: op::FILL,
        flags: flag::DST_VRAM,
        seqno: 9,
        src: 0,
        dst: (2 << 20) - 8,
        len: 16,
    });
    r.settle();
    assert_eq!(r.reg(reg::ERROR), error::VRAM_RANGE);
    // Unknown opcodes and flags; a bad ring.
    r.dev
        .region_write(region::BAR0, reg::CTRL, &CTRL_RESET.to_le_bytes())
        .unwrap();
    r.tail = 0;
    r.submit(Command {
        opcode: 7,
        seqno: 10,
        ..Default::default()
    });
    r.settle();
    assert_eq!(r.reg(reg::ERROR), error::BAD_COMMAND);
    r.dev
        .region_write(region::BAR0, reg::CTRL, &CTRL_RESET.to_le_bytes())
        .unwrap();
    r.dev
        .region_write(region::BAR0, reg::RING_SIZE, &3u32.to_le_bytes())
        .unwrap();
    r.tail = 0;
    r.submit(Command::default());
    r.settle();
    assert_eq!(r.reg(reg::ERROR), error::BAD_RING);
}

#[test]
fn no_dma_without_bus_mastering() {
    let mut r = Rig::new();
    r.dev.region_write(region::CONFIG, 4, &[0x02, 0]).unwrap();
    r.submit(Command {
        opcode: op::NOP,
        seqno: 1,
        ..Default::default()
    });
    r.settle();
    assert_eq!(
        r.reg(reg::ERROR),
        error::DMA_FAULT,
        "the ring itself is out of reach"
    );
    assert_eq!(r.fence(), 0);
}

#[test]
fn commands_round_trip() {
    let c = Command {
        opcode: op::COPY,
        flags: flag::ALL,
        seqno: u64::MAX,
        src: 1,
        dst: 2,
        len: 3,
    };
    assert_eq!(Command::decode(&c.encode()), c);
}

/// A copy from memory QEMU serves slowly, with INTERRUPT, and 15 NOPs
/// after it in the ring: reset while it runs.
fn slow_copy_then_nops(r: &mut Rig) {
    r.submit(Command {
        opcode: op::COPY,
        flags: flag::DST_VRAM | flag::INTERRUPT,
        seqno: 7,
        src: REMOTE,
        dst: 0,
        len: 8,
    });
    for i in 1..15 {
        r.ram
            .write(
                i * 64,
                &Command {
                    opcode: op::NOP,
                    seqno: 100 + i,
                    ..Default::default()
                }
                .encode(),
            )
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
}

/// After a reset, the command that was running completes into nothing:
/// no fence, no interrupt, no progress, and no stale entry runs.
fn check_reset_left_nothing(r: &Rig) {
    assert_eq!(
        r.reg(reg::STATUS) & status::IDLE,
        0,
        "busy until the command stops"
    );
    r.settle();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(r.fence(), 0);
    assert_eq!(r.reg(reg::HEAD), 0);
    assert_eq!(r.reg(reg::DONE_LO), 0);
    assert_eq!(r.reg(crate::regs::IRQ_STATUS), 0);
    assert_eq!(r.vram_word(), 0, "the copy stopped before its step");
}

#[test]
fn a_ctrl_reset_stops_the_running_command_unfenced() {
    let mut r = Rig::with_remote(&Slow);
    r.set(crate::regs::IRQ_ENABLE, crate::regs::cause::ALL);
    slow_copy_then_nops(&mut r);
    r.set(reg::CTRL, CTRL_RESET);
    check_reset_left_nothing(&r);
}

#[test]
fn a_device_reset_stops_the_running_command_unfenced() {
    let mut r = Rig::with_remote(&Slow);
    slow_copy_then_nops(&mut r);
    r.dev.reset().unwrap();
    check_reset_left_nothing(&r);
}

#[test]
fn a_ring_past_the_address_space_or_a_head_past_the_ring_halts() {
    let r = Rig::new();
    // Head at 10 of 16 (NOPs), then the ring shrinks to 4 with a FILL
    // where entry 10 was: never run.
    r.ram
        .write(
            10 * 64,
            &Command {
                opcode: op::FILL,
                flags: flag::DST_VRAM,
                seqno: 5,
                src: 0x42,
                dst: 0,
                len: 8,
            }
            .encode(),
        )
        .unwrap();
    r.set(reg::TAIL, 10);
    r.settle();
    assert_eq!(r.reg(reg::HEAD), 10);
    r.set(reg::RING_SIZE, 4);
    r.set(reg::TAIL, 1);
    r.settle();
    assert_eq!(r.reg(reg::ERROR), error::BAD_RING);
    assert_eq!(r.vram_word(), 0);
    // A ring whose entry would lie past the end of the address space.
    r.set(reg::CTRL, CTRL_RESET);
    r.set(reg::RING_SIZE, 128);
    r.set(reg::FENCE_LO, (RAM + 0x8_0000) as u32);
    r.set(reg::TAIL, 100);
    r.settle();
    assert_eq!(r.reg(reg::HEAD), 100);
    r.set(reg::RING_LO, 0xffff_f000);
    r.set(reg::RING_HI, 0xffff_ffff);
    r.set(reg::TAIL, 101);
    r.settle();
    assert_eq!(r.reg(reg::ERROR), error::BAD_RING);
}
