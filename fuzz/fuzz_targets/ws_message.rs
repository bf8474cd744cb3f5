//! Fuzz target `ws_message`: the checks of `herald_fuzz_targets::ws_message`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| herald_fuzz_targets::ws_message(data));
