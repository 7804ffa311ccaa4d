//! The Level Zero headers (`ze_ddi.h`, `zet_ddi.h`, `zes_ddi.h` and the API
//! headers they include), as bindgen translates them in `build.rs`.
//!
//! Enumerations are plain constants (`ZE_RESULT_SUCCESS: ze_result_t`).

#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    unsafe_op_in_unsafe_fn,
    rustdoc::all,
    clippy::all,
    clippy::pedantic,
    clippy::undocumented_unsafe_blocks
)]

include!(concat!(env!("OUT_DIR"), "/sys.rs"));
