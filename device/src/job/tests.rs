//! The job engine against a device: page tables written into its VRAM, a
//! ring and data pages in memfd-backed "guest RAM".

use super::*;
use crate::device::{region, Device};
use crate::dma::{prot, NoRemote};
use crate::mem::{memfd, Mmap};
use crate::mmu::{self, entry};
use crate::ring::status;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// "Guest RAM" at DMA address [`RAM`]: the ring (16 entries), the fence
/// at +0x1000, the pattern at +0x2000, the checksum's result at +0x3000,
/// system pages from +0x10000. VRAM (4 MiB): the context table at 0,
/// context 0's tables from 0x1000 (the last level at [`LEAF`], covering
/// the 2 MiB at [`VA`]), data pages from 1 MiB.
struct Rig {
    dev: Arc<Device>,
    ram: Mmap,
    engine: Option<std::thread::JoinHandle<Result<(), Error>>>,
    tail: u32,
    seqno: u64,
    inv: u32,
}

const RAM: u64 = 0x10_0000;
const FENCE: u64 = RAM + 0x1000;
const PATTERN: u64 = RAM + 0x2000;
const RESULT: u64 = RAM + 0x3000;
const SYS: u64 = RAM + 0x10000;
const VA: u64 = 0x5555_5540_0000;
const LEAF: u64 = 0x4000;
const DATA: u64 = 1 << 20;

impl Rig {
    fn new() -> Self {
        let dev = Arc::new(Device::new(4 << 20).unwrap());
        let fd = memfd("ram", 1 << 20).unwrap();
        let ram = Mmap::new(&fd, 0, 1 << 20).unwrap();
        dev.dma()
            .map(RAM, 1 << 20, prot::READ | prot::WRITE, Some((fd, 0)))
            .unwrap();
        dev.region_write(region::CONFIG, 4, &[0x06, 0]).unwrap();
        let d = dev.clone();
        let engine = Some(std::thread::spawn(move || d.run_job_engine(&NoRemote)));
        let r = Self {
            dev,
            ram,
            engine,
            tail: 0,
            seqno: 0,
            inv: 0,
        };
        r.set(reg::RING_LO, RAM as u32);
        r.set(reg::RING_SIZE, 16);
        r.set(reg::FENCE_LO, FENCE as u32);
        r.set(mmu::reg::CTX_LO, 0);
        r.set(mmu::reg::CTX_COUNT, 1);
        r.set(mmu::reg::CHECK, 1);
        r.vram_u64(0, 0x1000 | entry::VALID);
        let idx = |level: u32| (VA >> (12 + 9 * level)) & 511;
        r.vram_u64(0x1000 + 8 * idx(3), 0x2000 | entry::VALID);
        r.vram_u64(0x2000 + 8 * idx(2), 0x3000 | entry::VALID);
        r.vram_u64(0x3000 + 8 * idx(1), LEAF | entry::VALID);
        r
    }

    fn set(&self, reg: u64, v: u32) {
        self.dev
            .region_write(region::BAR0, reg, &v.to_le_bytes())
            .unwrap();
    }

    fn reg(&self, reg: u64) -> u32 {
        let mut b = [0; 4];
        self.dev.region_read(region::BAR0, reg, &mut b).unwrap();
        u32::from_le_bytes(b)
    }

    fn vram_u64(&self, off: u64, v: u64) {
        self.dev
            .region_write(region::BAR2, off, &v.to_le_bytes())
            .unwrap();
    }

    fn vram(&self, off: u64, n: usize) -> Vec<u8> {
        let mut b = vec![0; n];
        self.dev.region_read(region::BAR2, off, &mut b).unwrap();
        b
    }

    fn sys(&self, off: u64, n: usize) -> Vec<u8> {
        let mut b = vec![0; n];
        self.ram.read(off - RAM, &mut b).unwrap();
        b
    }

    /// Maps page `i` of the 2 MiB at [`VA`] with entry `pte`.
    fn map(&self, i: u64, pte: u64) {
        self.vram_u64(LEAF + 8 * i, pte);
    }

    /// Page `i` at [`VA`] to VRAM data page `p`, writable.
    fn map_vram(&self, i: u64, p: u64) {
        self.map(i, (DATA + p * 4096) | entry::VALID | entry::WRITE);
    }

    /// Invalidates `[start, end)` of context 0 and waits for `INV_DONE`.
    fn invalidate(&mut self, start: u64, end: u64) {
        self.inv += 1;
        self.set(mmu::reg::INV_CTX, 0);
        self.set(mmu::reg::INV_START_LO, start as u32);
        self.set(mmu::reg::INV_START_HI, (start >> 32) as u32);
        self.set(mmu::reg::INV_END_LO, end as u32);
        self.set(mmu::reg::INV_END_HI, (end >> 32) as u32);
        self.set(mmu::reg::INV_SEQNO, self.inv);
        let t = Instant::now();
        while self.reg(mmu::reg::INV_DONE) != self.inv {
            assert!(t.elapsed() < Duration::from_secs(10), "invalidation stuck");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Puts `c` in the ring and rings the doorbell.
    fn submit(&mut self, mut c: Command) {
        self.seqno += 1;
        c.seqno = self.seqno;
        self.ram
            .write(u64::from(self.tail) * 64, &c.encode())
            .unwrap();
        self.tail = (self.tail + 1) % 16;
        self.set(reg::TAIL, self.tail);
    }

    /// Waits until `reg` has `bits` set.
    fn wait_for(&self, reg: u64, bits: u32) {
        let t = Instant::now();
        while self.reg(reg) & bits == 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "engine stuck");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Runs `c` and waits until the engine is idle or halted: the error
    /// code (0: none).
    fn run(&mut self, c: Command) -> u32 {
        self.submit(c);
        self.wait_for(reg::STATUS, status::IDLE | status::HALTED);
        self.reg(reg::ERROR)
    }

    /// Resets a halted engine.
    fn reset(&mut self) {
        self.set(reg::CTRL, crate::ring::CTRL_RESET);
        self.tail = 0;
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

fn job(opcode: u32, dst: u64, len: u64) -> Command {
    Command {
        opcode,
        ctx: 0,
        dst,
        len,
        ..Command::default()
    }
}

#[test]
fn jobs_fill_copy_add_and_hash_through_the_page_table() {
    let mut r = Rig::new();
    // Pages 0-1 in VRAM (data pages 3 and 1: not contiguous), page 2 a
    // system page.
    r.map_vram(0, 3);
    r.map_vram(1, 1);
    r.map(2, SYS | entry::VALID | entry::WRITE | entry::SYSTEM);
    r.ram.write(PATTERN - RAM, b"abcde").unwrap();
    let mut fill = job(op::FILL, VA + 100, 3 * 4096 - 200);
    fill.src = PATTERN;
    fill.pattern_len = 5;
    fill.phase = 2;
    assert_eq!(r.run(fill), 0);
    let want = |k: usize| b"abcde"[(2 + k) % 5];
    let p0 = r.vram(DATA + 3 * 4096, 4096);
    let p1 = r.vram(DATA + 4096, 4096);
    let p2 = r.sys(SYS, 4096);
    assert_eq!(p0[99], 0, "before the job's first byte");
    assert_eq!(p0[100], want(0));
    assert_eq!(p1[0], want(4096 - 100));
    assert_eq!(p2[4095 - 100], want(3 * 4096 - 201));
    assert_eq!(p2[4096 - 100], 0, "after its last byte");
    // COPY page 2 (system) over page 0 (VRAM), unaligned.
    let mut copy = job(op::COPY, VA + 8, 4000);
    copy.src = VA + 2 * 4096 + 8;
    assert_eq!(r.run(copy), 0);
    assert_eq!(r.vram(DATA + 3 * 4096 + 8, 4000), r.sys(SYS + 8, 4000));
    // ATOMIC_ADD over the three pages' first words.
    // The three pages' first words.
    let words = |r: &Rig| -> Vec<u64> {
        [
            r.vram(DATA + 3 * 4096, 8),
            r.vram(DATA + 4096, 8),
            r.sys(SYS, 8),
        ]
        .iter()
        .map(|b| u64::from_le_bytes(b[..].try_into().unwrap()))
        .collect()
    };
    let before = words(&r);
    for p in 0..3 {
        let mut add = job(op::ATOMIC_ADD, VA + p * 4096, 8);
        add.src = 1000 + p;
        assert_eq!(r.run(add), 0);
    }
    let after = words(&r);
    for p in 0..3 {
        assert_eq!(after[p], before[p].wrapping_add(1000 + p as u64));
    }
    // CHECKSUM of the three pages, from a seed.
    let mut sum = job(op::CHECKSUM, VA, 3 * 4096);
    sum.phase = 0xcbf2_9ce4_8422_2325;
    sum.result = RESULT;
    assert_eq!(r.run(sum), 0);
    let mut bytes = r.vram(DATA + 3 * 4096, 4096);
    bytes.extend(r.vram(DATA + 4096, 4096));
    bytes.extend(r.sys(SYS, 4096));
    let record = r.sys(RESULT, RECORD_LEN);
    let got = u64::from_le_bytes(record[..8].try_into().unwrap());
    assert_eq!(got, fnv1a(0xcbf2_9ce4_8422_2325, &bytes));
    // Its TLB: three pages, each translated once, all cached by the jobs
    // before.
    let hits = u32::from_le_bytes(record[8..12].try_into().unwrap());
    let misses = u32::from_le_bytes(record[12..16].try_into().unwrap());
    assert_eq!((hits, misses), (3, 0));
    assert_eq!(r.reg(reg::DONE_LO), 6);
    let mut f = [0; 8];
    r.ram.read(FENCE - RAM, &mut f).unwrap();
    assert_eq!(u64::from_le_bytes(f), 6);
}

#[test]
fn a_chained_checksum_continues_the_hash_of_the_job_before() {
    let mut r = Rig::new();
    let data: Vec<u8> = (0..4 * 4096u32).map(|i| (i * 7 + i / 4096) as u8).collect();
    for p in 0..4u64 {
        r.map_vram(p, 10 + p);
        let page = &data[p as usize * 4096..][..4096];
        r.dev
            .region_write(region::BAR2, DATA + (10 + p) * 4096, page)
            .unwrap();
    }
    // Two halves queued back to back: the second's seed is the first's
    // record (its `phase` ignored), read when it starts.
    let seed = 0xcbf2_9ce4_8422_2325;
    let mut first = job(op::CHECKSUM, VA, 2 * 4096);
    first.phase = seed;
    first.result = RESULT;
    let mut second = job(op::CHECKSUM, VA + 2 * 4096, 2 * 4096);
    second.flags = flag::CHAIN;
    second.src = RESULT;
    second.phase = 0xdead;
    second.result = RESULT + RECORD_LEN as u64;
    r.submit(first);
    assert_eq!(r.run(second), 0);
    let hash = |at: u64| u64::from_le_bytes(r.sys(at, 8).try_into().unwrap());
    assert_eq!(hash(RESULT), fnv1a(seed, &data[..2 * 4096]));
    assert_eq!(hash(RESULT + RECORD_LEN as u64), fnv1a(seed, &data));
    assert_eq!(r.reg(reg::DONE_LO), 2);
    // CHAIN on anything but a CHECKSUM, or from a misaligned seed, is a
    // malformed command.
    let mut fill = job(op::FILL, VA, 64);
    fill.src = PATTERN;
    fill.pattern_len = 1;
    fill.flags = flag::CHAIN;
    assert_eq!(r.run(fill), crate::ring::error::BAD_COMMAND);
    assert_eq!(r.vram(DATA + 10 * 4096, 64), data[..64]);
    r.reset();
    let mut odd = second;
    odd.src = RESULT + 4;
    assert_eq!(r.run(odd), crate::ring::error::BAD_COMMAND);
    r.reset();
    // A seed the device cannot read: DMA_FAULT, no record written.
    let mut lost = second;
    lost.src = 0x4000_0000;
    lost.result = RESULT + 2 * RECORD_LEN as u64;
    assert_eq!(r.run(lost), crate::ring::error::DMA_FAULT);
    assert_eq!(r.sys(lost.result, RECORD_LEN), vec![0; RECORD_LEN]);
    r.reset();
    assert_eq!(r.run(second), 0);
}

#[test]
fn a_bad_entry_fails_the_job_and_touches_nothing_it_was_not_given() {
    let mut r = Rig::new();
    // No entry: a page fault at the address.
    let mut fill = job(op::FILL, VA + 5 * 4096 + 16, 64);
    fill.src = PATTERN;
    fill.pattern_len = 1;
    assert_eq!(r.run(fill), crate::ring::error::PAGE_FAULT);
    let addr =
        u64::from(r.reg(reg::ERROR_ADDR_LO)) | (u64::from(r.reg(reg::ERROR_ADDR_LO + 4)) << 32);
    assert_eq!(addr, VA + 5 * 4096 + 16);
    r.reset();
    // Read-only: a write faults.
    r.map(5, (DATA + 4096) | entry::VALID);
    r.ram.write(PATTERN - RAM, &[0xee]).unwrap();
    assert_eq!(r.run(fill), crate::ring::error::PAGE_FAULT);
    assert_eq!(r.vram(DATA + 4096, 4096), vec![0; 4096]);
    r.reset();
    // An entry past the end of VRAM.
    r.map(6, (64 << 20) | entry::VALID | entry::WRITE);
    r.invalidate(VA, VA + (2 << 20));
    let mut fill6 = fill;
    fill6.dst = VA + 6 * 4096;
    assert_eq!(r.run(fill6), crate::ring::error::VRAM_RANGE);
    r.reset();
    // A DMA address never mapped for the device.
    r.map(7, 0x4000_0000 | entry::VALID | entry::WRITE | entry::SYSTEM);
    let mut fill7 = fill;
    fill7.dst = VA + 7 * 4096;
    assert_eq!(r.run(fill7), crate::ring::error::DMA_FAULT);
    assert_eq!(r.dev.dma().counts().refused, 1);
    r.reset();
    // A context past the table.
    let mut other = fill;
    other.ctx = 1;
    assert_eq!(r.run(other), crate::ring::error::BAD_CONTEXT);
    r.reset();
    // The engine is usable after each reset.
    r.map_vram(8, 2);
    let mut fill8 = fill;
    fill8.dst = VA + 8 * 4096;
    assert_eq!(r.run(fill8), 0);
    assert_eq!(r.vram(DATA + 2 * 4096, 64), vec![0xee; 64]);
}

#[test]
fn a_missed_invalidation_is_caught_by_the_checking_mode() {
    let mut r = Rig::new();
    r.ram.write(PATTERN - RAM, &[0x11]).unwrap();
    r.map_vram(0, 4);
    let mut fill = job(op::FILL, VA, 4096);
    fill.src = PATTERN;
    fill.pattern_len = 1;
    assert_eq!(r.run(fill), 0);
    // The page is taken away and given to another (page 5), with the
    // invalidation: the job writes the new page.
    r.map_vram(0, 5);
    r.invalidate(VA, VA + 4096);
    r.ram.write(PATTERN - RAM, &[0x22]).unwrap();
    assert_eq!(r.run(fill), 0);
    assert_eq!(r.vram(DATA + 5 * 4096, 4096), vec![0x22; 4096]);
    assert_eq!(r.vram(DATA + 4 * 4096, 4096), vec![0x11; 4096]);
    // Again without it: the checking mode halts the job at its first
    // access, before it writes the page the TLB still names.
    r.map_vram(0, 6);
    r.ram.write(PATTERN - RAM, &[0x33]).unwrap();
    assert_eq!(r.run(fill), crate::ring::error::STALE_TLB);
    assert_eq!(r.vram(DATA + 5 * 4096, 4096), vec![0x22; 4096]);
    assert_eq!(r.reg(mmu::reg::STALE), 1);
    assert!(r.reg(mmu::reg::TLB_HITS) > 0);
    assert_eq!(r.reg(mmu::reg::INVALIDATIONS), 1);
}

#[test]
fn tables_in_system_memory_are_walked_by_dma() {
    let mut r = Rig::new();
    // The context table and context 0's tables in "guest RAM" from
    // RAM + 0x4000 (each entry pointing to a table marks it SYSTEM); the
    // last level maps page 0 to a VRAM data page.
    let t = |k: u64| RAM + 0x4000 + k * 0x1000;
    let put = |r: &Rig, at: u64, v: u64| r.ram.write(at - RAM, &v.to_le_bytes()).unwrap();
    let idx = |level: u32| (VA >> (12 + 9 * level)) & 511;
    put(&r, t(0), t(1) | entry::VALID | entry::SYSTEM);
    put(&r, t(1) + 8 * idx(3), t(2) | entry::VALID | entry::SYSTEM);
    put(&r, t(2) + 8 * idx(2), t(3) | entry::VALID | entry::SYSTEM);
    put(&r, t(3) + 8 * idx(1), t(4) | entry::VALID | entry::SYSTEM);
    put(&r, t(4), (DATA + 9 * 4096) | entry::VALID | entry::WRITE);
    r.set(mmu::reg::CTX_LO, t(0) as u32 | 1);
    r.ram.write(PATTERN - RAM, &[0x5a]).unwrap();
    let mut fill = job(op::FILL, VA, 4096);
    fill.src = PATTERN;
    fill.pattern_len = 1;
    assert_eq!(r.run(fill), 0);
    assert_eq!(r.vram(DATA + 9 * 4096, 4096), vec![0x5a; 4096]);
    // A table at a DMA address the device was never given.
    put(
        &r,
        t(3) + 8 * idx(1),
        0x4000_0000 | entry::VALID | entry::SYSTEM,
    );
    r.invalidate(VA, VA + 4096);
    assert_eq!(r.run(fill), crate::ring::error::DMA_FAULT);
}

/// The fault buffer's records at [`FAULTS`].
const FAULTS: u64 = RAM + 0x4000;

impl Rig {
    /// Record `k` of the fault buffer.
    fn record(&self, k: u64) -> fault::Record {
        let b = self.sys(FAULTS + k * fault::RECORD_LEN as u64, fault::RECORD_LEN);
        fault::Record::decode(b.as_slice().try_into().unwrap())
    }

    /// The completion record at [`RESULT`]: hash, bytes done, status.
    fn completion(&self) -> (u64, u64, u32) {
        let b = self.sys(RESULT, RECORD_LEN);
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        (
            u64_at(0),
            u64_at(16),
            u32::from_le_bytes(b[24..28].try_into().unwrap()),
        )
    }

    /// Answers the stall with `answer` and waits until the engine stalls
    /// again or is idle.
    fn answer(&self, answer: u32) {
        let answers = || self.reg(fault::reg::REPLAYS) + self.reg(fault::reg::CANCELS);
        let before = answers();
        self.set(fault::reg::CTRL, answer);
        let t = Instant::now();
        while answers() == before
            || self.reg(fault::reg::STATUS) & fault::status::STALLED == 0
                && self.reg(reg::STATUS) & status::IDLE == 0
        {
            assert!(t.elapsed() < Duration::from_secs(10), "engine stuck");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[test]
fn a_fault_stalls_the_job_until_replayed_and_an_overflow_loses_no_fault() {
    use crate::fault::{reg as f, status as fs, REPLAY};
    let mut r = Rig::new();
    r.set(f::BUF_LO, FAULTS as u32);
    r.set(f::BUF_SIZE, 2);
    r.map_vram(0, 0);
    let mut add = job(op::ATOMIC_ADD, VA, 3 * 4096);
    add.src = 5;
    add.result = RESULT;
    r.submit(add);
    r.wait_for(f::STATUS, fs::STALLED);
    // Page 0 is done; page 1 faulted, as an atomic access, 4096 bytes in.
    assert_eq!(r.reg(f::PUT), 1);
    let rec = r.record(0);
    assert_eq!(
        (rec.addr, rec.access, rec.done, rec.seqno, rec.ctx),
        (VA + 4096, fault::access::ATOMIC, 4096, 1, 0)
    );
    assert_eq!(r.vram(DATA, 8), 5u64.to_le_bytes());
    // Invalidations are done while the job is stalled.
    r.invalidate(VA, VA + 4096);
    // Replayed without the entry: it faults again, into the last slot;
    // then into a full buffer: OVERFLOW, no record, still stalled.
    r.answer(REPLAY);
    assert_eq!(r.reg(f::PUT), 2);
    r.answer(REPLAY);
    assert_eq!(r.reg(f::PUT), 2);
    assert_eq!(r.reg(f::STATUS), fs::STALLED | fs::OVERFLOW);
    assert_eq!(r.reg(f::OVERFLOWS), 1);
    // Consumed and cleared, page 1 mapped: the replay reaches page 2,
    // whose fault is recorded, wrapping to the first slot.
    r.set(f::GET, 2);
    r.set(f::STATUS, fs::OVERFLOW);
    r.map_vram(1, 1);
    r.answer(REPLAY);
    assert_eq!(r.reg(f::PUT), 3);
    assert_eq!((r.record(0).addr, r.record(0).done), (VA + 2 * 4096, 8192));
    r.map_vram(2, 2);
    r.answer(REPLAY);
    assert_eq!(r.reg(reg::ERROR), 0);
    // Every word added once: a replay redoes nothing done.
    for p in 0..3 {
        let words = r.vram(DATA + p * 4096, 4096);
        assert!(words
            .chunks(8)
            .all(|w| u64::from_le_bytes(w.try_into().unwrap()) == 5));
    }
    assert_eq!(r.completion(), (0, 3 * 4096, super::status::DONE));
    assert_eq!(r.reg(f::REPLAYS), 4);
    assert_eq!(r.reg(f::FAULTS), 3);
}

#[test]
fn a_cancelled_fault_ends_only_its_job() {
    use crate::fault::{reg as f, status as fs, CANCEL};
    let mut r = Rig::new();
    r.set(f::BUF_LO, FAULTS as u32);
    r.set(f::BUF_SIZE, 4);
    for p in 0..3 {
        r.map_vram(p, p);
        r.vram_u64(DATA + p * 4096, p + 1);
    }
    let mut sum = job(op::CHECKSUM, VA, 4 * 4096);
    sum.phase = 77;
    sum.result = RESULT;
    r.submit(sum);
    r.wait_for(f::STATUS, fs::STALLED);
    assert_eq!(r.record(0).addr, VA + 3 * 4096);
    r.answer(CANCEL);
    // Not an error: the job completed, cancelled after three pages, with
    // the hash of those.
    assert_eq!(r.reg(reg::STATUS) & status::HALTED, 0);
    assert_eq!(r.reg(reg::ERROR), 0);
    let want = fnv1a(
        77,
        &[
            r.vram(DATA, 4096),
            r.vram(DATA + 4096, 4096),
            r.vram(DATA + 8192, 4096),
        ]
        .concat(),
    );
    assert_eq!(r.completion(), (want, 3 * 4096, super::status::CANCELLED));
    assert_eq!(r.reg(f::CANCELS), 1);
    // The next job runs, faulting on nothing.
    r.map_vram(3, 3);
    assert_eq!(r.run(sum), 0);
    assert_eq!(r.completion().2, super::status::DONE);
    // With faults off, a miss fails the job as before.
    r.set(f::BUF_SIZE, 0);
    assert_eq!(
        r.run(job(op::CHECKSUM, VA + 9 * 4096, 8)),
        crate::ring::error::PAGE_FAULT
    );
}

#[test]
fn the_watchdog_stops_a_job_that_runs_past_it_and_the_next_one_runs() {
    use crate::fault::{reg as f, status as fs, REPLAY};
    use crate::regs::{cause, IRQ_STATUS, JOB_WATCHDOG};
    let mut r = Rig::new();
    let sem = SYS + 0x8000;
    let wait = |value| Command {
        opcode: op::WAIT,
        src: sem,
        phase: value,
        ..Command::default()
    };
    // No watchdog: a WAIT runs until the CPU releases it.
    r.submit(wait(2));
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(r.reg(reg::STATUS) & status::IDLE, 0, "waits");
    r.ram.write(sem - RAM, &2u64.to_le_bytes()).unwrap();
    r.wait_for(reg::STATUS, status::IDLE | status::HALTED);
    assert_eq!(r.reg(reg::ERROR), 0);
    // A WAIT never released runs past a 20 ms watchdog: halted with
    // WATCHDOG and its cause, a fill queued behind it not run.
    r.set(JOB_WATCHDOG, 20_000);
    r.map_vram(0, 0);
    r.vram_u64(DATA, 0x1111);
    let start = Instant::now();
    r.submit(wait(3));
    let mut fill = job(op::FILL, VA, 8);
    fill.src = PATTERN;
    fill.pattern_len = 1;
    r.ram.write(PATTERN - RAM, &[0xee]).unwrap();
    r.submit(fill);
    r.wait_for(reg::STATUS, status::HALTED);
    assert!(start.elapsed() >= Duration::from_millis(20));
    assert_eq!(r.reg(reg::ERROR), crate::ring::error::WATCHDOG);
    assert_eq!(
        r.reg(crate::ring::reg::ERROR_SEQNO_LO + BASE),
        2,
        "the WAIT"
    );
    let both = cause::WATCHDOG | cause::ERROR;
    assert_eq!(r.reg(IRQ_STATUS) & both, both);
    assert_eq!(r.vram(DATA, 8), 0x1111u64.to_le_bytes(), "untouched");
    // The engine was busy about the 30 ms of the first WAIT and the 20
    // of this.
    let busy = r.reg(crate::regs::JOB_BUSY);
    assert!((40_000..10_000_000).contains(&busy), "JOB_BUSY {busy} us");
    // Reset, the same fill runs.
    r.reset();
    assert_eq!(r.run(fill), 0);
    assert_eq!(r.vram(DATA, 8), [0xee; 8]);
    // Time stalled on a fault is not counted: a fault answered after
    // three times the watchdog replays, and the job completes.
    r.set(f::BUF_LO, FAULTS as u32);
    r.set(f::BUF_SIZE, 4);
    r.map(1, 0);
    r.submit(job(op::CHECKSUM, VA, 2 * 4096));
    r.wait_for(f::STATUS, fs::STALLED);
    std::thread::sleep(Duration::from_millis(60));
    r.map_vram(1, 1);
    r.answer(REPLAY);
    r.wait_for(reg::STATUS, status::IDLE | status::HALTED);
    assert_eq!(r.reg(reg::ERROR), 0);
}

#[test]
fn a_device_stopped_under_a_wait_ends_its_engine_and_reports_nothing() {
    use crate::regs::{cause, IRQ_STATUS};
    let mut r = Rig::new();
    r.submit(Command {
        opcode: op::WAIT,
        src: SYS,
        phase: 1,
        ..Command::default()
    });
    std::thread::sleep(Duration::from_millis(20));
    r.dev.stop();
    let engine = r.engine.take().unwrap();
    let t = Instant::now();
    while !engine.is_finished() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the engine did not end"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    engine.join().unwrap().unwrap();
    assert_eq!(r.reg(reg::STATUS) & status::HALTED, 0);
    assert_eq!(r.reg(IRQ_STATUS) & cause::ERROR, 0);
}
