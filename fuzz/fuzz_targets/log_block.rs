//! Fuzz target `log_block`: the checks of `herald_fuzz_targets::log_block`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| herald_fuzz_targets::log_block(data));
