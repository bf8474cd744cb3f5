//! Fuzz target `trigger_def`: the checks of `herald_fuzz_targets::trigger_def`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| herald_fuzz_targets::trigger_def(data));
