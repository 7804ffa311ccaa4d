//! The walk, the TLB, invalidation and the checking mode, on tables in a
//! plain buffer standing for VRAM.

use super::*;
use std::cell::RefCell;

/// 64 KiB of "VRAM": the context table at 0, context 0's tables at
/// 0x1000 (root), 0x2000, 0x3000 and its last level at 0x4000, covering
/// the 2 MiB at [`VA`].
struct Tables {
    vram: RefCell<Vec<u8>>,
}

const VA: u64 = 0x7f12_3440_0000;
const LEAF: u64 = 0x4000;

impl Tables {
    fn new() -> Self {
        let t = Tables {
            vram: RefCell::new(vec![0; 64 << 10]),
        };
        t.set(0, 0x1000 | entry::VALID);
        let idx = |level: u32| (VA >> (12 + 9 * level)) & 511;
        t.set(0x1000 + 8 * idx(3), 0x2000 | entry::VALID);
        t.set(0x2000 + 8 * idx(2), 0x3000 | entry::VALID);
        t.set(0x3000 + 8 * idx(1), LEAF | entry::VALID);
        t
    }

    fn set(&self, off: u64, v: u64) {
        let o = off as usize;
        self.vram.borrow_mut()[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// Maps page `i` of the 2 MiB at [`VA`] with `pte`.
    fn map(&self, i: u64, pte: u64) {
        self.set(LEAF + 8 * i, pte);
    }

    fn read(&self) -> impl Fn(bool, u64) -> Option<u64> + '_ {
        |_system, off| {
            let v = self.vram.borrow();
            let o = usize::try_from(off).ok()?;
            let b = v.get(o..o.checked_add(8)?)?;
            Some(u64::from_le_bytes(b.try_into().ok()?))
        }
    }
}

fn setup(check: bool) -> Setup {
    Setup {
        ctx: 0,
        ctx_count: 1,
        check,
    }
}

fn go(tlb: &mut Tlb, t: &Tables, check: bool, va: u64, write: bool) -> Result<Target, Fault> {
    tlb.translate(&setup(check), &t.read(), (0, va), write)
}

#[test]
fn a_walk_follows_four_levels_to_vram_or_a_dma_address() {
    let t = Tables::new();
    t.map(0, 0x8000 | entry::VALID | entry::WRITE);
    t.map(1, 0x1234_5000 | entry::VALID | entry::SYSTEM);
    let mut tlb = Tlb::new();
    assert_eq!(
        go(&mut tlb, &t, false, VA + 0x10, true),
        Ok(Target::Vram(0x8010))
    );
    assert_eq!(
        go(&mut tlb, &t, false, VA + 0x1ff8, false),
        Ok(Target::Dma(0x1234_5ff8))
    );
    // Read-only: no write.
    assert_eq!(
        go(&mut tlb, &t, false, VA + 0x1000, true),
        Err(Fault {
            code: error::PAGE_FAULT,
            addr: VA + 0x1000
        })
    );
    // No entry, no table, no canonical address: a page fault there.
    for va in [VA + 0x2000, VA + (2 << 20), 1 << VA_BITS] {
        assert_eq!(
            go(&mut tlb, &t, false, va, false),
            Err(Fault {
                code: error::PAGE_FAULT,
                addr: va
            })
        );
    }
    // A context out of the table, or not valid.
    let s = setup(false);
    assert_eq!(
        tlb.translate(&s, &t.read(), (1, VA), false)
            .unwrap_err()
            .code,
        error::BAD_CONTEXT
    );
    t.set(0, 0x1000);
    assert_eq!(
        go(&mut tlb, &t, false, VA + 0x3000, false)
            .unwrap_err()
            .code,
        error::BAD_CONTEXT
    );
    // A table past the end of VRAM.
    t.set(0, (1 << 30) | entry::VALID);
    assert_eq!(
        go(&mut tlb, &t, false, VA + 0x3000, false)
            .unwrap_err()
            .code,
        error::VRAM_RANGE
    );
    let c = tlb.take_counts();
    assert_eq!((c.hits, c.misses), (1, 8));
}

#[test]
fn the_tlb_keeps_a_translation_until_it_is_invalidated() {
    let t = Tables::new();
    t.map(3, 0x8000 | entry::VALID | entry::WRITE);
    let mut tlb = Tlb::new();
    assert_eq!(
        go(&mut tlb, &t, false, VA + 0x3000, true),
        Ok(Target::Vram(0x8000))
    );
    // The table changes; without an invalidation the TLB still says the
    // old page (what a driver that forgets to invalidate gets).
    t.map(3, 0x9000 | entry::VALID | entry::WRITE);
    assert_eq!(
        go(&mut tlb, &t, false, VA + 0x3000, true),
        Ok(Target::Vram(0x8000))
    );
    // Another context's invalidation, or another range's: still.
    let inv = |ctx, start, end| Invalidation {
        ctx,
        start,
        end,
        seqno: 1,
    };
    tlb.invalidate(&inv(1, 0, 1 << VA_BITS));
    tlb.invalidate(&inv(0, VA, VA + 0x3000));
    assert_eq!(
        go(&mut tlb, &t, false, VA + 0x3000, true),
        Ok(Target::Vram(0x8000))
    );
    // Its own: the new page.
    tlb.invalidate(&inv(0, VA + 0x3000, VA + 0x3001));
    assert_eq!(
        go(&mut tlb, &t, false, VA + 0x3000, true),
        Ok(Target::Vram(0x9000))
    );
    // Every context, the whole space.
    t.map(3, 0xa000 | entry::VALID);
    tlb.invalidate(&inv(INV_ALL_CONTEXTS, 0, 1 << VA_BITS));
    assert_eq!(
        go(&mut tlb, &t, false, VA + 0x3000, false),
        Ok(Target::Vram(0xa000))
    );
}

#[test]
fn checking_mode_reports_a_translation_the_table_no_longer_holds() {
    let t = Tables::new();
    t.map(5, 0x8000 | entry::VALID | entry::WRITE);
    let mut tlb = Tlb::new();
    assert!(go(&mut tlb, &t, true, VA + 0x5000, true).is_ok());
    // A hit that still matches the table is fine.
    assert!(go(&mut tlb, &t, true, VA + 0x5000, true).is_ok());
    // Zapped without an invalidation.
    t.map(5, 0);
    assert_eq!(
        go(&mut tlb, &t, true, VA + 0x5008, true),
        Err(Fault {
            code: error::STALE_TLB,
            addr: VA + 0x5008
        })
    );
    assert_eq!(tlb.take_counts().stale, 1);
}

#[test]
fn invalidations_queue_until_done_and_a_reset_invalidates_everything() {
    let mut r = Regs::default();
    let w = |r: &mut Regs, off, v| r.write32(off, v);
    w(&mut r, reg::INV_CTX, 3);
    w(&mut r, reg::INV_START_LO, 0x1000);
    w(&mut r, reg::INV_END_LO, 0x3000);
    assert!(!r.has_pending());
    assert!(w(&mut r, reg::INV_SEQNO, 7));
    assert_eq!(r.read32(reg::INV_DONE), 0);
    let list = r.take_pending();
    assert_eq!(
        list.front(),
        Some(&Invalidation {
            ctx: 3,
            start: 0x1000,
            end: 0x3000,
            seqno: 7
        })
    );
    r.done(7);
    assert_eq!(r.read32(reg::INV_DONE), 7);
    w(&mut r, reg::INV_SEQNO, 8);
    r.reset();
    let list = r.take_pending();
    assert_eq!(list.len(), 2);
    assert_eq!(list[1].ctx, INV_ALL_CONTEXTS);
    assert_eq!(list[1].seqno, 8);
}
