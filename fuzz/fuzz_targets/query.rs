//! Fuzz target `query`: the checks of `herald_fuzz_targets::query`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| herald_fuzz_targets::query(data));
