//! Key templates: `USER#{email}`, `ORDER#{ordered_at:epoch_s}#{order_id}`.
//!
//! INTERFACE STUB (being implemented): the signatures below are the contract between the
//! template engine, the mapping loader and the pipeline.

use std::fmt;

/// The type of a placeholder, written after a colon: `{ordered_at:epoch_s}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaceholderType {
    /// Any non-empty text (the default when no type is written).
    String,
    /// A base-10 integer that fits i64; `width` set for zero-padded forms (`{seq:int(8)}`).
    Int { width: Option<usize> },
    /// Plain decimal text `-?\d+(\.\d+)?`, kept as written.
    Decimal,
    /// Seconds since the Unix epoch (UTC).
    EpochS,
    /// Milliseconds since the Unix epoch (UTC).
    EpochMs,
    /// An ISO 8601 / RFC 3339 UTC timestamp in canonical form.
    Iso8601,
    /// `YYYY-MM-DD`.
    Date,
    /// `8-4-4-4-12` hex digits.
    Uuid,
}

/// One named placeholder of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    pub name: String,
    pub ty: PlaceholderType,
    /// Inside the optional trailing part (`[...]`): absent in keys that lack it.
    pub optional: bool,
}

/// Unit of a [`KeyValue::Timestamp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Second,
    Millisecond,
    Microsecond,
}

/// The typed value a placeholder captured from a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyValue {
    Str(String),
    Int(i64),
    /// Decimal text exactly as written in the key.
    Decimal(String),
    /// Since the Unix epoch, UTC.
    Timestamp {
        unit: TimeUnit,
        value: i64,
    },
    /// Days since 1970-01-01.
    Date(i32),
}

/// A compiled key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    source: String,
}

/// Why a template's text does not compile; `offset` is the char index in the template text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    pub offset: usize,
    pub message: String,
    pub hint: Option<String>,
}

/// Why a key does not match a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchError {
    /// The placeholder that failed, when one did.
    pub placeholder: Option<String>,
    /// The expected form, for reject messages: `ORDER#{ordered_at:epoch_s}#{order_id}`, or
    /// `10-digit epoch seconds` for one placeholder.
    pub expected: String,
    pub message: String,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at character {})", self.message, self.offset)
    }
}

impl fmt::Display for MatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl KeyTemplate {
    pub fn parse(_source: &str) -> Result<KeyTemplate, TemplateError> {
        unimplemented!("template engine")
    }
    /// The template text as written.
    pub fn source(&self) -> &str {
        &self.source
    }
    /// Placeholders in order of appearance.
    pub fn placeholders(&self) -> &[Placeholder] {
        unimplemented!("template engine")
    }
    /// The literal text before the first placeholder (the whole key for constant templates).
    pub fn literal_prefix(&self) -> &str {
        unimplemented!("template engine")
    }
    /// Parses a key into one value per placeholder, in placeholder order (`None` for an absent
    /// optional part). Guarantees `render(captures(key)) == key`; a key that would not round
    /// trip is a [`MatchError`].
    pub fn captures(&self, _key: &str) -> Result<Vec<Option<KeyValue>>, MatchError> {
        unimplemented!("template engine")
    }
    /// Renders a key from one value per placeholder, in placeholder order.
    pub fn render(&self, _values: &[Option<KeyValue>]) -> Result<String, MatchError> {
        unimplemented!("template engine")
    }
}
