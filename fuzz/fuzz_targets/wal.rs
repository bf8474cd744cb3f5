//! Fuzz target `wal`: the checks of `herald_fuzz_targets::wal`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| herald_fuzz_targets::wal(data));
