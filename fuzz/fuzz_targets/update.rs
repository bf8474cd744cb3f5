//! Fuzz target `update`: the checks of `herald_fuzz_targets::update`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| herald_fuzz_targets::update(data));
