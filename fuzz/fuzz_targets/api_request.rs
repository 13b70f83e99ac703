#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| podvisor::fuzzing::api_request(data));
