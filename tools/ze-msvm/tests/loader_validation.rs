//! The Level Zero loader takes the driver under its validation layer, with
//! parameter validation (see `common`).

mod common;

#[test]
fn validation_layer_finds_one_driver() {
    common::smoke(&[
        ("ZE_ENABLE_VALIDATION_LAYER", "1"),
        ("ZE_ENABLE_PARAMETER_VALIDATION", "1"),
    ]);
}
