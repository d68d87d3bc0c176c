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
pub(crate) mod suggest;
pub mod template;
mod types;

pub use compile::{MappingText, compile, parse_str};
pub use error::{MappingError, MappingErrorKind, MappingErrors, Position, Snippet};
pub use model::{
    ChildMapping, ColumnMapping, ColumnSource, DeclaredType, EntityMapping, ErrorPolicy, KeyMapping, Mapping,
    TimestampFormat, UnmappedPolicy, UnmatchedPolicy,
};

/// `s` as a TOML string (quoted and escaped), for the mapping files etl writes (drafts, imports).
pub(crate) fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// `s` as a TOML key: bare when TOML allows it, quoted otherwise.
pub(crate) fn toml_key(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        s.to_owned()
    } else {
        toml_string(s)
    }
}
