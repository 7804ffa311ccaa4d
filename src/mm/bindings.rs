// SPDX-License-Identifier: GPL-2.0

//! Generated bindings (see `Kbuild` and `include/msvm_bindings.h`).
//!
//! Types the kernel's `bindings` crate already has are taken from it (the
//! generated file glob-imports `kernel::bindings`), so values move between the
//! two without casts.

#![allow(
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    dead_code,
    missing_docs,
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    improper_ctypes,
    unreachable_pub,
    unsafe_op_in_unsafe_fn
)]

include!("bindings_generated.rs");
