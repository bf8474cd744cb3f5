//! Fuzz target `commit_log`: the checks of `herald_fuzz_targets::commit_log`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| herald_fuzz_targets::commit_log(data));
