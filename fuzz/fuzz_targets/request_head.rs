#![no_main]
//! The header rules the proxy adds to hyper's HTTP/1 parsing (tailguard_proxy::fuzz::request_head).

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tailguard_proxy::fuzz::request_head(data);
});
