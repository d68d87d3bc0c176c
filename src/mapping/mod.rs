//! The mapping language and the shapes of the data: mapping files compiled once into typed
//! values, key templates, schema inference when no mapping file is given ([`infer`], from every
//! item, never a sample), and authoring (`etl mapping infer` drafts, `etl mapping check`).
//!
//! Applying a mapping to items at unwind time is `normalize`'s job. This module does no I/O.

pub mod check;
pub mod draft;
pub mod file;
pub mod infer;
pub mod keyinfer;
pub mod template;
