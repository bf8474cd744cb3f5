//! Fuzz target `rules`: the checks of `herald_fuzz_targets::rules`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| herald_fuzz_targets::rules(data));
