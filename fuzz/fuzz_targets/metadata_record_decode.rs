//! Arbitrary bytes as a `__consumer_offsets` record: `GroupRecord::decode(key, value)`.
//!
//! Input layout: `[ctl][key ++ value]`. `ctl >> 1` (mod the remaining length + 1) is the key's
//! length; `ctl & 1` says whether the value is present (`Some`) or a tombstone (`None`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_core::group_coordinator::GroupRecord;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else { return };
    let split = usize::from(ctl >> 1) % (rest.len() + 1);
    let (key, value) = rest.split_at(split);
    let value = if ctl & 1 == 1 { Some(value) } else { None };
    if let Ok(record) = GroupRecord::decode(key, value) {
        // Whatever decodes must encode to something that decodes to the same record.
        let (k, v) = record.encode();
        assert_eq!(GroupRecord::decode(&k, v.as_deref()), Ok(record));
    }
});
