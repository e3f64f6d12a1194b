//! cargo-fuzz target `scenario_sim`: see `fuzz/targets.rs`.
#![no_main]

#[path = "../targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::scenario_sim(data));
