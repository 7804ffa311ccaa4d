//! A minimal test runner for the guest: TAP-like lines and a summary.

use std::time::Instant;

/// What a test returns: `Err` carries the reason it failed.
pub type Outcome = Result<(), String>;

/// One named test.
pub struct Test {
    pub name: &'static str,
    pub run: fn() -> Outcome,
}

/// Fails the test with a message unless `cond` holds.
#[macro_export]
macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// Runs `tests` in order; prints a line per test and the summary. Returns
/// whether all passed.
pub fn run(tests: &[Test]) -> bool {
    println!("1..{}", tests.len());
    let (mut passed, mut failed) = (0, 0);
    for (i, t) in tests.iter().enumerate() {
        let start = Instant::now();
        let res = std::panic::catch_unwind(t.run).unwrap_or_else(|_| Err("panicked".to_string()));
        let ms = start.elapsed().as_millis();
        match res {
            Ok(()) => {
                passed += 1;
                println!("ok {} {} ({ms} ms)", i + 1, t.name);
            }
            Err(why) => {
                failed += 1;
                println!("not ok {} {} ({ms} ms): {why}", i + 1, t.name);
            }
        }
    }
    println!("msvm-tests: {passed} passed, {failed} failed");
    failed == 0
}
