//! Mapping errors: every problem of a mapping, located (file, line, column, entity, field) and
//! rendered like rustc, with the offending line underlined `^^^` and a `hint:` where the fix is
//! known.
//!
//! The compiler collects these; the edge that reads files adds its own (a missing file, a folder
//! without `.toml` files) through [`MappingError::unreadable`]. This module does no I/O.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Every problem found in the mapping files; nothing was compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappingErrors(pub Vec<MappingError>);

/// One problem, located in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappingError {
    pub file: PathBuf,
    /// Of the offending key or value; `None` for problems with a whole file.
    pub position: Option<Position>,
    pub entity: Option<String>,
    /// A path inside the entity (or the file): `columns[3].type`, `keys.PK`, `settings.unmapped`.
    /// Array indexes are 0-based.
    pub field: Option<String>,
    pub kind: MappingErrorKind,
    pub hint: Option<String>,
    /// The source line, for display.
    pub snippet: Option<Snippet>,
}

/// 1-based line and column; the column counts characters, not bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

/// The offending line with the span to underline (in characters, 0-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snippet {
    pub line_text: String,
    pub start: usize,
    pub len: usize,
}

/// What is wrong; the facts of each problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingErrorKind {
    #[error("cannot read the mapping: {message}")]
    Io { message: String },
    #[error("no mapping files given")]
    NoFiles,
    #[error("no `.toml` files in folder `{}`", folder.display())]
    NoTomlFiles { folder: PathBuf },
    #[error("invalid TOML: {message}")]
    Syntax { message: String },
    #[error("unknown field `{field}` in {context}")]
    UnknownField { field: String, context: &'static str },
    #[error("`{field}` must be {expected}, not {found}")]
    WrongValueType { field: String, expected: &'static str, found: &'static str },
    #[error("{context} has no `{field}`")]
    MissingField { field: &'static str, context: String },
    #[error("`{field}` is empty")]
    Empty { field: String },
    #[error("`{field}` lists `{value}` twice")]
    DuplicateValue { field: String, value: String },
    #[error("unknown value `{value}` for `{field}`")]
    BadValue { field: &'static str, value: String },
    #[error("invalid table name `{table}`")]
    InvalidTableName { table: String },
    #[error("table `{table}` is already written by {first}")]
    DuplicateTable { table: String, first: String },
    #[error("type value `{value}` is already matched by {first}")]
    DuplicateMatch { value: String, first: String },
    #[error("{first} already claims untyped items with the same key prefixes")]
    DuplicateKeyPrefix { first: String },
    #[error("column `{column}` appears twice in table `{table}`")]
    DuplicateColumn { table: String, column: String },
    #[error("column name `{column}` starts with `_`, which is reserved for etl's own columns")]
    ReservedColumnName { column: String },
    #[error("{}", unknown_type_message(.name, .text, .column))]
    UnknownType { column: String, name: String, text: String },
    #[error("invalid type `{text}` for column `{column}`: {message}")]
    TypeSyntax { column: String, text: String, message: String },
    #[error("decimal precision {precision} in `{text}` is out of range for column `{column}`")]
    DecimalPrecision { column: String, text: String, precision: u64 },
    #[error("decimal scale {scale} exceeds the precision {precision} in `{text}` for column `{column}`")]
    DecimalScale { column: String, text: String, precision: u64, scale: u64 },
    #[error("sets cannot hold `{element}` (column `{column}`)")]
    SetElement { column: String, element: String },
    #[error("map keys must be `string`, not `{key}` (column `{column}`)")]
    MapKey { column: String, key: String },
    #[error("column `{column}` has no `type`")]
    MissingType { column: String },
    #[error("column `{column}` holds timestamps but has no `format`")]
    MissingTimeFormat { column: String },
    #[error("unknown timestamp format `{format}` for column `{column}`")]
    UnknownTimeFormat { column: String, format: String },
    #[error("invalid strftime pattern `{pattern}` for column `{column}`: {reason}")]
    BadPattern { column: String, pattern: String, reason: &'static str },
    #[error("`{format}` is not a date format (column `{column}`)")]
    DateFormat { column: String, format: String },
    #[error("`format` does not apply to column `{column}` of type `{ty}`")]
    FormatNotApplicable { column: String, ty: String },
    #[error("`timezone` has no effect on column `{column}`: {reason}")]
    TimezoneNotApplicable { column: String, reason: &'static str },
    #[error("unknown timezone `{timezone}` for column `{column}`")]
    BadTimezone { column: String, timezone: String },
    #[error("invalid key template for `{attribute}`: {message}")]
    BadTemplate { attribute: String, message: String },
    #[error("placeholder `{placeholder}` is `{ty}` in `{attribute}` but `{first_ty}` in `{first_attribute}`")]
    PlaceholderConflict {
        placeholder: String,
        attribute: String,
        ty: String,
        first_attribute: String,
        first_ty: String,
    },
    #[error(
        "column `{column}` is declared `{declared}`, but it comes from placeholder `{{{column}:{placeholder_type}}}` of key `{attribute}`"
    )]
    IncompatibleType { column: String, declared: String, placeholder_type: String, attribute: String },
    #[error("column `{column}` comes from key `{attribute}` and cannot have a `{field}`")]
    PlaceholderColumnField { column: String, attribute: String, field: &'static str },
    #[error("column `{column}` has a `copy`, but no key placeholder is named `{column}`")]
    CopyWithoutKey { column: String },
    #[error("attribute `{attribute}` is in `drop`, but {reader} reads it")]
    DropConflict { attribute: String, reader: String },
    #[error("child table `{table}` copies `{column}`, which is not a column of table `{parent}`")]
    UnknownParentColumn { table: String, column: String, parent: String },
    #[error("child table `{table}` has no `parent_columns`, and its parent has no key placeholders to copy")]
    NoParentColumns { table: String },
    #[error("key prefix `{prefix}` for `{attribute}` can never match its template `{template}`")]
    KeyPrefixMismatch { attribute: String, prefix: String, template: String },
    #[error("setting `{setting}` is `{value}` here but `{other}` in {other_at}")]
    SettingConflict { setting: &'static str, value: String, other: String, other_at: String },
    #[error("the mapping defines no entities")]
    NoEntities,
}

/// Names the whole type when the unknown name is its head (`decimall(12,2)`), else both.
fn unknown_type_message(name: &str, text: &str, column: &str) -> String {
    let text = text.trim();
    let head =
        text.strip_prefix(name).is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'));
    if head {
        format!("unknown type `{text}` for column `{column}`")
    } else {
        format!("unknown type `{name}` in `{text}` for column `{column}`")
    }
}

impl MappingError {
    /// The one-line message (without location or hint).
    pub fn message(&self) -> String {
        self.kind.to_string()
    }
}

impl fmt::Display for MappingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "error: {}", self.kind)?;
        write!(f, "  --> {}", self.file.display())?;
        if let Some(p) = self.position {
            write!(f, ":{}:{}", p.line, p.column)?;
        }
        match (&self.entity, &self.field) {
            (Some(e), Some(fl)) => write!(f, " (entity `{e}`, field `{fl}`)")?,
            (Some(e), None) => write!(f, " (entity `{e}`)")?,
            (None, Some(fl)) => write!(f, " (field `{fl}`)")?,
            (None, None) => {}
        }
        if let (Some(s), Some(p)) = (&self.snippet, self.position) {
            let number = p.line.to_string();
            let pad = " ".repeat(number.len());
            write!(f, "\n{pad} |\n{number} | {}\n{pad} | {}{}", s.line_text, " ".repeat(s.start), "^".repeat(s.len))?;
        }
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for MappingError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.kind)
    }
}

impl fmt::Display for MappingErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.0 {
            writeln!(f, "{e}\n")?;
        }
        let n = self.0.len();
        write!(f, "{n} {} in the mapping; nothing was run", if n == 1 { "problem" } else { "problems" })
    }
}

impl std::error::Error for MappingErrors {}

impl MappingError {
    /// A problem with a whole file, found before compiling it: it cannot be read, or it is a
    /// folder with no `.toml` files in it.
    pub fn unreadable(file: &Path, kind: MappingErrorKind) -> MappingError {
        MappingError {
            file: file.to_owned(),
            position: None,
            entity: None,
            field: None,
            kind,
            hint: None,
            snippet: None,
        }
    }
}

/// One mapping text with its line index: turns byte offsets into positions and snippets.
pub(super) struct Source {
    pub(super) path: PathBuf,
    pub(super) text: String,
    line_starts: Vec<usize>,
}

impl Source {
    pub(super) fn new(path: PathBuf, text: String) -> Source {
        let line_starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        Source { path, text, line_starts }
    }

    fn floor(&self, offset: usize) -> usize {
        let mut o = offset.min(self.text.len());
        while !self.text.is_char_boundary(o) {
            o -= 1;
        }
        o
    }

    /// The line index (0-based), its start and end (without the line break).
    fn line_of(&self, offset: usize) -> (usize, usize, usize) {
        let line = self.line_starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let start = self.line_starts.get(line).copied().unwrap_or(0);
        let end = self.line_starts.get(line + 1).map_or(self.text.len(), |&e| e.saturating_sub(1));
        let end = if self.text.get(start..end).is_some_and(|l| l.ends_with('\r')) { end - 1 } else { end };
        (line, start, end.max(start))
    }

    pub(super) fn position(&self, offset: usize) -> Position {
        let offset = self.floor(offset);
        let (line, start, _) = self.line_of(offset);
        let column = self.text.get(start..offset).map_or(0, |s| s.chars().count()) + 1;
        Position { line: line + 1, column }
    }

    pub(super) fn snippet(&self, span: &Range<usize>) -> Snippet {
        let from = self.floor(span.start);
        let (_, start, end) = self.line_of(from);
        let line = self.text.get(start..end).unwrap_or("");
        let col = self.text.get(start..from.min(end)).map_or(0, |s| s.chars().count());
        let to = self.floor(span.end.min(end)).max(from);
        let len = self.text.get(from..to).map_or(0, |s| s.chars().count()).max(1);
        Snippet { line_text: line.replace('\t', " "), start: col, len }
    }

    pub(super) fn location(&self, offset: usize) -> String {
        let p = self.position(offset);
        format!("{}:{}:{}", self.path.display(), p.line, p.column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_characters() {
        let src = Source::new("f".into(), "a = 1\nüü = \"x\"\r\nlast".into());
        assert_eq!(src.position(0), Position { line: 1, column: 1 });
        assert_eq!(src.position(6), Position { line: 2, column: 1 });
        assert_eq!(src.position(11), Position { line: 2, column: 4 });
        assert_eq!(src.position(10_000), Position { line: 3, column: 5 });
        assert_eq!(src.snippet(&(11..12)).line_text, "üü = \"x\"");
        // Inside a multi-byte character: the character it is in.
        assert_eq!(src.position(7), Position { line: 2, column: 1 });
    }
}
