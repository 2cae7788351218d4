#![no_main]
//! The experiment file: parsed, validated and resolved (tailguard_model::fuzz::experiment).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tailguard_model::fuzz::experiment(data);
});
