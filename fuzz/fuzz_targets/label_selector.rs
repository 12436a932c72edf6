#![no_main]
//! cargo fuzz target: `kinformer_sim::fuzz::label_selector` (no input may panic).

libfuzzer_sys::fuzz_target!(|data: &[u8]| kinformer_sim::fuzz::label_selector(data));
