#![no_main]
//! The proxy file: parsed, validated, built and written back (tailguard_proxy::fuzz::config).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tailguard_proxy::fuzz::config(data);
});
