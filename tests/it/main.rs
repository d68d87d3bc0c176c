//! The one integration-test binary: runs the `etl` binary on real inputs and reads back what it
//! wrote.

mod aws;
mod common;
mod corpus;
mod fault;
mod fuzz;
mod import;
mod interop;
mod json_conformance;
mod mapping;
mod output;
mod real_export;
mod roundtrip;
mod sample;
mod shapes;
mod sql;
mod tampered;
