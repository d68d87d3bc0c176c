//! The one integration-test binary: runs the `etl` binary on real inputs and reads back what it
//! wrote.

// Test code: unwrapping is how a test fails, and stderr is where it says why.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

mod apply;
mod apply_s3;
mod aws;
mod ballista;
mod chain;
mod common;
mod corpus;
mod delta;
mod delta_s3;
mod drift;
mod fault;
mod fuzz;
mod import;
mod incremental;
mod interop;
mod ion;
mod json_conformance;
mod mapping;
mod output;
mod real_export;
mod rejects;
mod roundtrip;
mod sample;
mod shapes;
mod shard;
mod shard_s3;
mod sql;
mod tampered;
mod types;
mod unmapped;
