//! Fuzz target `jwt`: the checks of `herald_fuzz_targets::jwt`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| herald_fuzz_targets::jwt(data));
