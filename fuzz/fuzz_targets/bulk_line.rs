//! Fuzz target `bulk_line`: the checks of `herald_fuzz_targets::bulk_line`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| herald_fuzz_targets::bulk_line(data));
