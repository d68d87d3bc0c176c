//! From typed items to Arrow: table naming, and column builders that append items to a
//! [`TableSchema`]'s columns and finish them into `RecordBatch`es.
//!
//! Knows nothing of where bytes come from or go. A value that does not fit its column is an
//! error carrying the column and the value's DynamoDB type; with inferred schemas that is a bug.

pub mod builder;
pub mod naming;

pub use builder::{BatchBuilder, NormalizeError, RejectsBuilder, rejects_schema};
