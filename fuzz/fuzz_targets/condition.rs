//! The alert-rule condition parser on arbitrary text: never panics; errors point inside the
//! text; a parsed condition evaluates on a full, an empty and an offline observation.
#![no_main]

use fleetlens_core::rules::Condition;
use libfuzzer_sys::fuzz_target;

#[path = "../common/condition_probes.rs"]
mod condition_probes;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Condition::parse(text) {
        Err(e) => {
            assert!(e.column() <= text.chars().count() + 1, "error column beyond the text");
            let _ = e.pointer(text);
        }
        Ok(c) => {
            let _ = condition_probes::eval_on_probes(&c);
        }
    }
});
