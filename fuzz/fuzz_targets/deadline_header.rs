#![no_main]
//! The x-tailguard-deadline-ms header (tailguard_proxy::fuzz::deadline_header).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tailguard_proxy::fuzz::deadline_header(data);
});
