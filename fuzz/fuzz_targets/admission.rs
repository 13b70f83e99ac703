#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| podvisor_controller::fuzzing::admission(data));
