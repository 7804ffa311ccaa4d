//! The Level Zero loader takes the driver (see `common`).

mod common;

#[test]
fn loader_finds_one_driver() {
    common::smoke(&[]);
}
