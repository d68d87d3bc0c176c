//! # etl: unwind DynamoDB single-table designs into exact analytics tables
//!
//! `etl` reads DynamoDB exports (Export to S3, DynamoDB JSON) and `aws dynamodb scan` output,
//! splits items by their type attribute into one table per entity, and writes Parquet with
//! exact types: numbers keep all 38 digits, sets stay sets, binary stays bytes. Every input item
//! ends in exactly one place, a row of its entity table or a row of `_rejects`, and the run
//! report reconciles the counts with the export's manifests.
//!
//! ```text
//!  source              decode                 mapping / normalize          sink
//!  ------              ------                 -------------------          ----
//!  export manifests    JSON line / scan item  route by type attribute      Parquet part files
//!  bare data files --> -> Item (exact typed --> infer schema per entity --> _rejects table
//!  scan output            values) or reject     Arrow builders per table     staged dir, atomic commit
//!                                                                            _etl/run.json, schemas
//! ```
//!
//! The central contract is `(table schema, items) -> RecordBatch`: modules left of it know
//! DynamoDB and nothing of files, modules right of it know Arrow and files and nothing of
//! DynamoDB. [`pipeline`] wires the stages together in two bounded passes (read and infer, then
//! write), parallel across files and across output parts, deterministic whatever the thread
//! count. [`cli`] is the only module that knows terminals and exit codes.
//!
//! Deviation from `ARCHITECTURE.md`, on purpose: local files are read with `std::fs` and
//! decoded on plain threads; only `s3://` objects go through `object_store`, streamed by a task
//! on a small I/O runtime into the same decoder threads through bounded channels ([`source::object`]).

pub mod aws;
pub mod cli;
pub mod decode;
pub mod mapping;
pub mod normalize;
pub mod pipeline;
pub mod sample;
pub mod sink;
pub mod source;
pub mod sql;
