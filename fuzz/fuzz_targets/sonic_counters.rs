//! cargo-fuzz target `sonic_counters`: see `fuzz/targets.rs`.
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::sonic_counters(data));
