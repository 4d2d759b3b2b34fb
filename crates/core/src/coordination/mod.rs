//! Coordination between deploys of one resource: the Lease that serializes
//! them, the ledger each pod keeps of what was applied on it, and what the
//! ledgers say about ownership (status, adoption, the pods an apply without a
//! state may record).
//!
//! In `lease` and `ledger`, `mod.rs` is the pure part (names, scripts,
//! readers) and imports nothing from `transport`; `run.rs` drives it over the
//! transport, as steps of a reconcile run.

pub mod lease;
pub mod ledger;
pub mod ownership;
