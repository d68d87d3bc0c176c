//! The mapping language and the shapes of the data.
//!
//! The mapping language, compiled once: the model ([`Mapping`] and the types it holds), the
//! compiler from TOML texts ([`compile`], [`parse_str`]), the column type grammar, errors with
//! positions and hints, did-you-mean suggestions, and key templates ([`template`]). Schema
//! inference when no mapping file is given ([`infer`], from every item, never a sample).
//! Authoring helps sit beside it: drafting from data ([`draft`], [`keyinfer`]), checking
//! ([`check`]) and importing entity models ([`import`]).
//!
//! Applying a mapping to items at unwind time is `normalize`'s job. This module does no I/O:
//! files are read at the command line's edge and handed in as texts.

pub mod check;
mod compile;
pub mod draft;
mod error;
pub mod import;
pub mod infer;
pub mod keyinfer;
mod model;
mod suggest;
pub mod template;
mod types;

pub use compile::{MappingText, compile, parse_str};
pub use error::{MappingError, MappingErrorKind, MappingErrors, Position, Snippet};
pub use model::{
    ChildMapping, ColumnMapping, ColumnSource, DeclaredType, EntityMapping, ErrorPolicy, KeyMapping, Mapping,
    TimestampFormat, UnmappedPolicy, UnmatchedPolicy,
};
