//! # etl: unwind DynamoDB single-table designs into exact analytics tables
//!
//! `etl` reads DynamoDB exports (Export to S3, DynamoDB JSON; local or in object storage), live
//! tables and `aws dynamodb scan` output, splits items by their type attribute into one table
//! per entity (or the tables a mapping file declares), and writes Parquet with exact types:
//! numbers keep all 38 digits, sets stay sets, binary stays bytes. Every input item ends in
//! exactly one place, a row of its entity table or a row of `_rejects`, and the run manifest
//! reconciles the counts with the export's manifests.
//!
//! ```text
//!  source                decode             normalize                  sink                   sql
//!  ------                ------             ---------                  ----                   ---
//!  Location -> Plan      Frame -> Record    Record -> (TableId, rows)  Sink: parts + commit   reads what a
//!  of DataFiles          Put(Item)          route, apply mapping,      Parquet parts, staged  RunManifest
//!  Framer: gzip, MD5,    Change{keys, ...}  rejects (one reason table) local or object store  lists
//!  lines -> Frame        JSON, scan items   BatchBuilder -> RecordBatch RunManifest last
//! ```
//!
//! | stage | module | its contract |
//! |---|---|---|
//! | where bytes live | [`store`] | [`store::Location`], [`store::Target`], [`store::StoreError`] |
//! | what to read | [`source`] | [`source::Plan`] of [`source::DataFile`]s, [`source::frame::Framer`] yielding [`source::frame::Frame`]s |
//! | wire formats | [`decode`] | [`decode::decode`]: bytes of a [`decode::Format`] to a [`decode::Record`] or a [`decode::DecodeError`] |
//! | the table contract | [`schema`] | [`schema::TableSchema`], [`schema::ColumnType`] |
//! | the mapping language | [`mapping`] | [`mapping::Mapping`], key templates, inferred shapes |
//! | per item | [`normalize`] | [`normalize::Normalizer`]: a record to [`normalize::TableId`]s and rows, or a [`normalize::Reject`]; [`normalize::BatchBuilder`] |
//! | where tables go | [`sink`] | the [`sink::Sink`] trait (parts, then one commit), [`sink::RunManifest`] |
//! | wiring | [`pipeline`] | [`pipeline::unwind`] over [`pipeline::UnwindSettings`], one [`pipeline::pool`]; a chain of exports applied by [`pipeline::chain`]; sharded runs and their one commit by [`pipeline::shard`] |
//! | run state | [`state`] | [`state::RunState`]: the exports an output holds, compared before a chain is applied |
//! | reading committed output | [`sql`] | [`sql::Session`] over what a run manifest lists |
//! | terminals and exit codes | [`cli`] | arguments resolved by [`cli::settings`] |
//!
//! The central contract is a [`normalize::TableId`] with its rows, then its `RecordBatch`es:
//! modules left of it know DynamoDB and nothing of files, modules right of it know Arrow and
//! files and nothing of DynamoDB. [`aws`] is the DynamoDB control plane (live scans, exports);
//! [`sample`] is an independent generator of sample exports, used as an oracle by the tests.
//!
//! Deviation from `ARCHITECTURE.md`, on purpose: local files are read with `std::fs` and
//! decoded on plain threads; only object-store inputs go through `object_store`, streamed by a
//! task on the I/O runtime into the same decoder threads through bounded channels
//! ([`source::object`]). Live scans are still spooled to files by [`aws::dynamodb`].

pub mod aws;
pub mod cli;
pub mod decode;
pub mod mapping;
pub mod normalize;
pub mod pipeline;
pub mod sample;
pub mod schema;
pub mod sink;
pub mod source;
pub mod sql;
pub mod state;
pub mod store;
