// SPDX-License-Identifier: GPL-2.0

//! Thrashing detection's KUnit tests.

use kernel::prelude::*;

#[kunit_tests(msvm_thrash)]
mod tests {
    use super::super::*;

    // Lapse 100 ms (25 ticks), pin 1000 ms (250), epoch 5000 ms (1250);
    // times below are in ticks.
    fn knobs() -> Knobs {
        Knobs::new(3, 100, 1000, 5000, 2)
    }

    fn dev(i: usize) -> u64 {
        Place::Device(i).code()
    }

    const SYS: u64 = 1;

    /// Whether the block of `addr` of `p` is pinned now.
    fn is_pinned(p: &Process, addr: usize) -> bool {
        p.with(addr, false, |s| s.is_some_and(|s| holds_pin(s)))
    }

    /// A move at `now` as [`moved`] makes it.
    fn mv(b: Block, to: u64, now: u64) -> (Block, Verdict) {
        let mut v = Verdict::default();
        let b = b
            .current(1, now, &knobs(), &mut v)
            .moved(to, now, &knobs(), &mut v);
        (b, v)
    }

    /// A placement pass's question at `now`, as [`before_move`] asks it.
    fn ask(b: Block, to: u64, now: u64) -> (Block, Verdict) {
        let mut v = Verdict::default();
        let b = b
            .current(1, now, &knobs(), &mut v)
            .ask(to, now, &knobs(), &mut v);
        (b, v)
    }

    #[test]
    fn slot_round_trips() {
        let b = Block {
            tag: TAG_MASK,
            place: 17,
            count: 7,
            resets: 5,
            had_pin: true,
            pinned: true,
            last: TIME_MASK,
            pin_end: TIME_MASK - 1,
        };
        assert_eq!(Block::from_word(b.word()), b);
        assert_eq!(Block::from_word(Block::default().word()), Block::default());
    }

    #[test]
    fn third_event_within_lapse_is_refused_and_pins() {
        let b = Block::default();
        // A job pulls it in (an arrival, not an event), the CPU takes it
        // home (event 1), more faults of the same pass change nothing.
        let (b, _) = mv(b, dev(0), 0);
        assert_eq!(b.count, 0);
        let (b, _) = mv(b, SYS, 10);
        let (b, _) = mv(b, SYS, 12);
        assert_eq!(b.count, 1);
        // A job may pull it in again (event 2).
        let (b, v) = ask(b, dev(0), 20);
        assert_eq!(v, Verdict::default());
        let (b, _) = mv(b, dev(0), 21);
        assert_eq!(b.count, 2);
        // Another device's job would make event 3: refused, pinned.
        let (b, v) = ask(b, dev(1), 30);
        assert!(v.stay && v.pinned && v.detected && !v.avoided);
        assert_eq!(b.place, dev(0));
        // Jobs then use it in place until the pin ends (at 280): avoided.
        let (b, v) = ask(b, SYS, 200);
        assert!(v.stay && v.avoided && !v.pinned);
        // One on the device it is on: nothing to avoid.
        let (b, v) = ask(b, dev(0), 210);
        assert!(!v.stay && !v.avoided);
        // After the pin: dropped, counted, and the move is allowed.
        let (b, v) = ask(b, dev(1), 300);
        assert!(v.unpinned && !v.stay);
        assert!(!b.pinned && b.had_pin);
        let (b, _) = mv(b, dev(1), 301);
        assert_eq!((b.place, b.count), (dev(1), 0));
    }

    #[test]
    fn asking_creates_no_history() {
        let (b, v) = ask(Block::default(), dev(0), 5);
        assert_eq!(v, Verdict::default());
        assert_eq!(b.place, 0);
    }

    #[test]
    fn slow_moves_never_pin() {
        let mut b = Block::default();
        for i in 0..10u64 {
            let to = if i % 2 == 0 { dev(1) } else { SYS };
            let (_, v) = ask(b, to, i * 50);
            assert!(!v.stay && !v.detected);
            let (n, _) = mv(b, to, i * 50);
            assert_eq!(n.count, 0);
            b = n;
        }
    }

    #[test]
    fn a_cpu_fault_is_never_refused_and_pins_at_home() {
        let (b, _) = mv(Block::default(), dev(0), 0);
        let (b, _) = mv(b, SYS, 5);
        let (b, _) = mv(b, dev(0), 10);
        // The CPU's fault makes event 3: it moves and pins the block home.
        let (b, v) = mv(b, SYS, 15);
        assert!(v.pinned && v.detected);
        assert_eq!(b.place, SYS);
        assert!(b.pin_holds(15, &knobs()));
        // A job then uses it there.
        let (b, v) = ask(b, dev(0), 20);
        assert!(v.stay && v.avoided);
        assert!(b.pin_holds(20, &knobs()));
        // Pinned on a device, a CPU fault still takes it home.
        let (b, _) = mv(Block { place: dev(1), ..b }, SYS, 25);
        assert_eq!(b.place, SYS);
        assert!(b.pin_holds(25, &knobs()));
    }

    #[test]
    fn quiet_epochs_reset_then_give_up() {
        let k = knobs();
        let mut b = Block::default();
        let (mut t, mut pins) = (0, 0);
        for _ in 0..7 {
            for to in [dev(0), SYS, dev(0), SYS, dev(0), SYS] {
                let (n, v) = mv(b, to, t);
                pins += u64::from(v.pinned);
                b = n;
                t += 5;
            }
            // Quiet for longer than the pin and the epoch.
            t += 2000;
        }
        // Pinned in each of the first max_resets + 1 bursts only, once.
        assert_eq!(pins, k.max_resets + 1);
    }

    #[test]
    fn an_explicit_move_ends_count_and_pin() {
        let (b, _) = mv(Block::default(), dev(0), 0);
        let (b, _) = mv(b, SYS, 5);
        let (b, v) = mv(b, dev(0), 10);
        assert_eq!((b.count, v), (2, Verdict::default()));
        let b = b.placed(dev(1), 12);
        assert_eq!((b.place, b.count, b.pinned), (dev(1), 0, false));
        let (_, v) = ask(b, dev(0), 14);
        assert!(!v.stay);
    }

    #[test]
    fn clock_races_and_wraps() {
        // A writer that read the clock before the last one: no gap.
        assert_eq!(since(100, 101), 0);
        assert_eq!(since(3, TIME_MASK - 2), 6);
        // A history touched 1 tick "in the future" is not forgotten.
        let (b, _) = mv(Block::default(), dev(0), 1001);
        let (b, _) = mv(b, SYS, 1000);
        assert_eq!((b.place, b.count), (SYS, 1));
        // A pin across the wrap of the time field holds until its end.
        let start = TIME_MASK - 100;
        let mut b = Block {
            tag: 1,
            place: SYS,
            ..Block::default()
        };
        b.pin(start, &knobs(), &mut Verdict::default());
        let k = knobs();
        assert!(b.pin_holds(start, &k) && b.pin_holds(start + 200, &k));
        assert!(!b.pin_holds(start + 250, &k));
        // Long after, never again (the wrapped distance exceeds the pin).
        for later in [
            start + 600,
            start + (TIME_MASK >> 1),
            start + TIME_MASK - 300,
        ] {
            assert!(!b.pin_holds(later, &k));
        }
        // A history half the range old is old, not in the future.
        assert_eq!(since(TIME_MASK >> 1, 0), TIME_MASK >> 1);
    }

    #[test]
    fn a_process_through_its_calls() -> Result {
        // With the module's knobs (defaults: lapse 10 s); skipped when
        // detection is off (`thrash=0`).
        if Knobs::get().is_none_or(|k| k.threshold != 3) {
            return Ok(());
        }
        let p = Process::new()?;
        let a = 0x4000_0000_usize;
        // Asking creates no history (and no state), and the answer is "move".
        assert_eq!(before_move(&p, a, Place::Device(0)), Verdict::default());
        assert_eq!(p.blocks(), 0);
        assert!(!is_pinned(&p, a));
        moved(&p, a, Place::Device(0));
        moved(&p, a, Place::System);
        assert!(!before_move(&p, a, Place::Device(0)).stay);
        moved(&p, a, Place::Device(0));
        let v = before_move(&p, a, Place::Device(1));
        assert!(v.stay && v.pinned && v.detected);
        assert!(is_pinned(&p, a));
        let v = before_move(&p, a, Place::System);
        assert!(v.stay && v.avoided);
        // Another process's block at the same address is its own.
        let q = Process::new()?;
        assert!(!is_pinned(&q, a) && !before_move(&q, a, Place::System).stay);
        // An explicit move ends the pin; an unmap forgets the block.
        placed_explicitly(&p, a, a + 1, Place::System);
        assert!(!is_pinned(&p, a));
        assert!(!before_move(&p, a, Place::Device(0)).stay);
        p.invalidated(a, a + PAGE, true);
        assert_eq!(p.blocks(), 0);
        Ok(())
    }

    const PAGE: usize = kernel::page::PAGE_SIZE;
}
