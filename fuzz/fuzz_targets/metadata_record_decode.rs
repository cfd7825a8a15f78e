//! Arbitrary bytes as a coordinator record: the `__consumer_offsets` records of classic groups
//! (`GroupRecord`) and share groups (`ShareGroupRecord`), the `__share_group_state` records
//! (`ShareStateRecord`, with KIP-1289's TX_PENDING batches: state 5 and the staging as tagged
//! field `STAGED_TXN_TAG` of the state batch) and the `__transaction_state` records
//! (`TxnRecord`, both key versions).
//!
//! Input layout: `[ctl][key ++ value]`. `ctl >> 1` (mod the remaining length + 1) is the key's
//! length; `ctl & 1` says whether the value is present (`Some`) or a tombstone (`None`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_core::group_coordinator::share::ShareGroupRecord;
use shoal_core::group_coordinator::GroupRecord;
use shoal_core::share_coordinator::ShareStateRecord;
use shoal_core::txn_coordinator::TxnRecord;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else { return };
    let split = usize::from(ctl >> 1) % (rest.len() + 1);
    let (key, value) = rest.split_at(split);
    let value = if ctl & 1 == 1 { Some(value) } else { None };
    // Whatever decodes must encode to something that decodes to the same record.
    if let Ok(record) = GroupRecord::decode(key, value) {
        let (k, v) = record.encode();
        assert_eq!(GroupRecord::decode(&k, v.as_deref()), Ok(record));
    }
    if let Ok(record) = ShareGroupRecord::decode(key, value) {
        if let Ok((k, v)) = record.encode() {
            assert_eq!(ShareGroupRecord::decode(&k, v.as_deref()), Ok(record));
        }
    }
    if let Ok(record) = TxnRecord::decode(key, value) {
        let (k, v) = record.encode();
        assert_eq!(TxnRecord::decode(&k, v.as_deref()), Ok(record));
    }
    if let Ok(record) = ShareStateRecord::decode(key, value) {
        if let Ok((k, v)) = record.encode() {
            assert_eq!(ShareStateRecord::decode(&k, v.as_deref()), Ok(record));
        }
    }
});
