//! `etl mapping import`: mapping files from the entity models teams already keep, so the key
//! templates and discriminators an entity library declares are not written a second time.
//!
//! Four readers, one per model format ([`ImportFormat`]), each turn a JSON model into a
//! [`Spec`]: a neutral description of entities, discriminator, key templates and columns, built
//! following the library's own key-building rules (ElectroDB's `$service` / `$entity_version`
//! prefixes, `#label_value` composites and whole-key casing; OneTable's `${name}` and
//! `${name:len:pad}` templates and dates; dynamodb-toolbox's `_et`, `savedAs` and prefixes;
//! NoSQL Workbench facets and their sample items). [`Spec::to_toml`] writes our mapping language,
//! and [`import`] compiles that text with the mapping compiler before handing it back, so what
//! is printed always loads.
//!
//! What a model says that a mapping cannot (computed attributes, hooks, nested packing) is never
//! dropped silently: it is listed in a comment of the mapping and returned as a warning. A model
//! this module cannot read is an [`ImportErrors`] naming file, entity and field, with a `hint:`.
//! This module does no I/O: it takes the model's text.

pub mod electrodb;
pub mod onetable;
pub mod toolbox;
pub mod workbench;

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use super::template::{escape_literal, to_placeholder_name};
use super::{Mapping, MappingErrors, parse_str};

/// The model formats `etl mapping import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportFormat {
    ElectroDb,
    OneTable,
    Toolbox,
    Workbench,
}

impl ImportFormat {
    /// The name used on the command line and in messages.
    pub fn name(self) -> &'static str {
        match self {
            ImportFormat::ElectroDb => "electrodb",
            ImportFormat::OneTable => "onetable",
            ImportFormat::Toolbox => "toolbox",
            ImportFormat::Workbench => "workbench",
        }
    }

    fn library(self) -> &'static str {
        match self {
            ImportFormat::ElectroDb => "ElectroDB",
            ImportFormat::OneTable => "OneTable",
            ImportFormat::Toolbox => "dynamodb-toolbox",
            ImportFormat::Workbench => "NoSQL Workbench",
        }
    }
}

/// A mapping imported from a model: its TOML text (which compiles), the compiled mapping, and
/// what could not be carried over.
#[derive(Debug, Clone)]
pub struct Imported {
    pub text: String,
    pub mapping: Mapping,
    /// One line per model feature with no equivalent in a mapping, for stderr.
    pub warnings: Vec<String>,
}

/// Reads a model of `format` from `text` (`file` names it in messages and comments).
pub fn import(format: ImportFormat, file: &Path, text: &str) -> Result<Imported, ImportErrors> {
    let json = parse_json(file, text)?;
    let cx = Cx { file: file.to_owned(), text, errors: Vec::new() };
    let spec = match format {
        ImportFormat::ElectroDb => electrodb::read(cx, &json)?,
        ImportFormat::OneTable => onetable::read(cx, &json)?,
        ImportFormat::Toolbox => toolbox::read(cx, &json)?,
        ImportFormat::Workbench => workbench::read(cx, &json)?,
    };
    let toml = spec.to_toml(format, file);
    match parse_str(Path::new("<imported>"), &toml) {
        Ok(mapping) => Ok(Imported { text: toml, mapping, warnings: spec.warnings() }),
        Err(errors) => Err(ImportErrors(vec![ImportError {
            file: file.to_owned(),
            entity: None,
            field: None,
            kind: ImportErrorKind::Internal { errors: Box::new(errors), text: toml },
            hint: Some("this is a bug in etl; please report it with the model".into()),
        }])),
    }
}

fn parse_json(file: &Path, text: &str) -> Result<Json, ImportErrors> {
    serde_json::from_str(text).map_err(|e| {
        ImportErrors(vec![ImportError {
            file: file.to_owned(),
            entity: None,
            field: None,
            kind: ImportErrorKind::Json { line: e.line(), column: e.column(), message: e.to_string() },
            hint: Some(
                "the model must be JSON: dump the JavaScript object with `JSON.stringify(model, null, 2)` \
                 (functions are left out, and listed as warnings when they matter)"
                    .into(),
            ),
        }])
    })
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Every problem found in a model; nothing was written.
#[derive(Debug)]
pub struct ImportErrors(pub Vec<ImportError>);

/// One problem of a model, with where it is.
#[derive(Debug)]
pub struct ImportError {
    pub file: PathBuf,
    pub entity: Option<String>,
    /// A path inside the entity (or the model): `indexes.byUser.pk.composite[0]`.
    pub field: Option<String>,
    pub kind: ImportErrorKind,
    pub hint: Option<String>,
}

/// What is wrong with a model.
#[derive(Debug, thiserror::Error)]
pub enum ImportErrorKind {
    #[error("the model is not valid JSON: {message}")]
    Json { line: usize, column: usize, message: String },
    #[error("`{field}` must be {expected}, not {found}")]
    WrongType { field: String, expected: &'static str, found: &'static str },
    #[error("{context} has no `{field}`")]
    Missing { field: String, context: String },
    #[error("key composite `{name}` is not an attribute of the entity")]
    UnknownAttribute { name: String },
    #[error("template field `{name}` is not a field of the model")]
    UnknownField { name: String },
    #[error("`{name}` is not a key attribute of the entity")]
    UnknownKey { name: String },
    #[error("unsupported {what}")]
    Unsupported { what: String },
    #[error("{what} cannot be told apart from the other entities' items")]
    NoRouting { what: String },
    #[error("the model defines no entities")]
    NoEntities,
    #[error("the imported mapping does not compile:\n{errors}\n--- the mapping ---\n{text}")]
    Internal { errors: Box<MappingErrors>, text: String },
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "error: {}", self.kind)?;
        write!(f, "  --> {}", self.file.display())?;
        if let ImportErrorKind::Json { line, column, .. } = &self.kind {
            write!(f, ":{line}:{column}")?;
        }
        match (&self.entity, &self.field) {
            (Some(e), Some(fl)) => write!(f, " (entity `{e}`, field `{fl}`)")?,
            (Some(e), None) => write!(f, " (entity `{e}`)")?,
            (None, Some(fl)) => write!(f, " (field `{fl}`)")?,
            (None, None) => {}
        }
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ImportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.kind)
    }
}

impl fmt::Display for ImportErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.0 {
            writeln!(f, "{e}\n")?;
        }
        let n = self.0.len();
        write!(f, "{n} {} in the model; nothing was written", if n == 1 { "problem" } else { "problems" })
    }
}

impl std::error::Error for ImportErrors {}

/// What the readers share: the file, its text (for source lines) and the errors so far.
pub(crate) struct Cx<'t> {
    file: PathBuf,
    text: &'t str,
    errors: Vec<ImportError>,
}

impl Cx<'_> {
    fn err(&mut self, entity: Option<&str>, field: Option<String>, kind: ImportErrorKind, hint: Option<String>) {
        self.errors.push(ImportError { file: self.file.clone(), entity: entity.map(str::to_owned), field, kind, hint });
    }

    fn wrong_type(&mut self, entity: Option<&str>, field: &str, expected: &'static str, found: &Json) {
        let kind = ImportErrorKind::WrongType { field: last_segment(field), expected, found: kind_of(found) };
        self.err(entity, Some(field.to_owned()), kind, None);
    }

    fn missing(&mut self, entity: Option<&str>, field: &str, context: &str, hint: Option<String>) {
        let kind = ImportErrorKind::Missing { field: last_segment(field), context: context.to_owned() };
        self.err(entity, Some(field.to_owned()), kind, hint);
    }

    /// `value` as an object, or an error.
    fn object<'v>(
        &mut self,
        entity: Option<&str>,
        field: &str,
        value: &'v Json,
    ) -> Option<&'v serde_json::Map<String, Json>> {
        match value {
            Json::Object(o) => Some(o),
            other => {
                self.wrong_type(entity, field, "an object", other);
                None
            }
        }
    }

    /// An optional string member; a non-string is an error.
    fn opt_str<'v>(&mut self, entity: Option<&str>, field: &str, value: Option<&'v Json>) -> Option<&'v str> {
        match value {
            None | Some(Json::Null) => None,
            Some(Json::String(s)) => Some(s),
            Some(other) => {
                self.wrong_type(entity, field, "a string", other);
                None
            }
        }
    }

    /// The 1-based line where `"name"` is first written as an object key, for comments.
    fn line_of_key(&self, name: &str) -> Option<usize> {
        self.key_offset(name, 0).map(|at| self.line_at(at))
    }

    fn line_at(&self, offset: usize) -> usize {
        self.text.get(..offset).map_or(1, |t| t.matches('\n').count() + 1)
    }

    /// Where `"name"` is first written as an object key at or after byte `from`. JSON objects
    /// come back from the parser in key order, so this gives the order the model was written in.
    fn key_offset(&self, name: &str, from: usize) -> Option<usize> {
        let quoted = serde_json::to_string(name).ok()?;
        let mut from = from;
        while let Some(i) = self.text.get(from..)?.find(&quoted) {
            let at = from + i;
            let after = self.text.get(at + quoted.len()..)?.trim_start();
            if after.starts_with(':') {
                return Some(at);
            }
            from = at + quoted.len();
        }
        None
    }

    /// Where `"key": "value"` is first written.
    fn pair_offset(&self, key: &str, value: &str) -> Option<usize> {
        let quoted = serde_json::to_string(value).ok()?;
        let mut from = 0;
        while let Some(at) = self.key_offset(key, from) {
            let after = self.text.get(at..)?.split_once(':')?.1.trim_start();
            if after.starts_with(&quoted) {
                return Some(at);
            }
            from = at + 1;
        }
        None
    }

    /// `names` in the order they are written as keys after byte `from` (unfound ones last).
    fn written_order<'n, T>(&self, items: Vec<(&'n String, T)>, from: usize) -> Vec<(&'n String, T)> {
        let mut keyed: Vec<(usize, (&'n String, T))> =
            items.into_iter().map(|(n, t)| (self.key_offset(n, from).unwrap_or(usize::MAX), (n, t))).collect();
        keyed.sort_by_key(|(o, _)| *o);
        keyed.into_iter().map(|(_, x)| x).collect()
    }

    fn finish(self, spec: Spec) -> Result<Spec, ImportErrors> {
        if self.errors.is_empty() { Ok(spec) } else { Err(ImportErrors(self.errors)) }
    }
}

fn last_segment(field: &str) -> String {
    field.rsplit('.').next().unwrap_or(field).to_owned()
}

/// A short name for a JSON value's kind, for messages.
fn kind_of(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

// ---------------------------------------------------------------------------------------------
// The neutral description and its TOML
// ---------------------------------------------------------------------------------------------

/// What an importer found: a mapping in the making.
#[derive(Debug, Default)]
pub(crate) struct Spec {
    /// `None`: entities are told apart by key prefixes only.
    pub type_attribute: Option<String>,
    /// Lines for the header comment (conventions read from the model).
    pub notes: Vec<String>,
    pub entities: Vec<EntitySpec>,
}

#[derive(Debug, Default)]
pub(crate) struct EntitySpec {
    pub name: String,
    pub table: String,
    pub match_values: Vec<String>,
    pub key_prefix: Vec<(String, String)>,
    /// The model line the entity is defined on.
    pub line: Option<usize>,
    pub keys: Vec<(String, String)>,
    pub columns: Vec<ColumnSpec>,
    pub drop: Vec<String>,
    /// Model features with no equivalent: `(field, what)`.
    pub unsupported: Vec<(String, String)>,
    pub placeholders: Placeholders,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct ColumnSpec {
    pub name: String,
    /// The attribute read, when it differs from `name` (not for key placeholders).
    pub source: Option<String>,
    /// `None` for key placeholders (the template types them).
    pub ty: Option<String>,
    pub format: Option<String>,
    pub required: bool,
    /// For key placeholders: the attribute holding the same value, when not named like it.
    pub copy: Option<String>,
}

/// Key placeholders of one entity: names and types, so the same composite in two keys is one
/// column (and a clash of types gets a name of its own).
#[derive(Debug, Default)]
pub(crate) struct Placeholders {
    /// name -> (type text, copy attribute)
    seen: BTreeMap<String, (String, Option<String>)>,
    order: Vec<String>,
}

impl Placeholders {
    /// The placeholder name to use for attribute `attribute` with type `ty` in key `key`.
    pub fn claim(&mut self, attribute: &str, ty: &str, key: &str, copy: Option<&str>) -> String {
        let base = to_placeholder_name(attribute).unwrap_or_else(|| "value".into());
        let base = if base.starts_with('_') { format!("v{base}") } else { base };
        match self.seen.get(&base) {
            Some((t, _)) if t == ty => base,
            None => {
                self.seen.insert(base.clone(), (ty.to_owned(), copy.map(str::to_owned)));
                self.order.push(base.clone());
                base
            }
            Some(_) => {
                // The same attribute typed differently in another key: a column of its own.
                let mut name = format!("{base}_{}", to_placeholder_name(key).unwrap_or_else(|| "key".into()));
                let mut n = 2;
                while self.seen.get(&name).is_some_and(|(t, _)| t != ty) {
                    name = format!("{base}_{n}");
                    n += 1;
                }
                if !self.seen.contains_key(&name) {
                    self.seen.insert(name.clone(), (ty.to_owned(), None));
                    self.order.push(name.clone());
                }
                name
            }
        }
    }

    /// Placeholder columns, in first-use order, with the attribute each copies.
    pub fn columns(&self, required: &dyn Fn(&str) -> bool) -> Vec<ColumnSpec> {
        self.order
            .iter()
            .map(|n| {
                let copy = self.seen.get(n).and_then(|(_, c)| c.clone()).filter(|c| c != n);
                let req = self.seen.get(n).and_then(|(_, c)| c.as_deref()).is_some_and(required);
                ColumnSpec { name: n.clone(), copy, required: req, ..ColumnSpec::default() }
            })
            .collect()
    }
}

/// A key template being written: literals escaped, placeholders typed.
#[derive(Debug, Default)]
pub(crate) struct TemplateText(pub String);

impl TemplateText {
    pub fn literal(&mut self, text: &str) {
        self.0.push_str(&escape_literal(text));
    }

    pub fn placeholder(&mut self, name: &str, ty: &str) {
        if ty == "string" {
            let _ = write!(self.0, "{{{name}}}");
        } else {
            let _ = write!(self.0, "{{{name}:{ty}}}");
        }
    }
}

/// A table name for an entity: snake_case, ASCII, starting with a letter.
pub(crate) fn table_name(entity: &str) -> String {
    let base = to_placeholder_name(entity).unwrap_or_else(|| "entity".into());
    let trimmed = base.trim_start_matches(|c: char| c == '_' || c.is_ascii_digit());
    if trimmed.is_empty() { format!("entity_{base}") } else { trimmed.to_owned() }
}

/// A column name for an attribute: snake_case, not starting with `_`.
pub(crate) fn column_name(attribute: &str) -> String {
    let base = to_placeholder_name(attribute).unwrap_or_else(|| "attribute".into());
    let trimmed = base.trim_start_matches('_');
    if trimmed.is_empty() { "attribute".into() } else { trimmed.to_owned() }
}

impl Spec {
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for e in &self.entities {
            for (field, what) in &e.unsupported {
                out.push(format!("entity `{}`, field `{field}`: {what}", e.name));
            }
        }
        out
    }

    pub fn to_toml(&self, format: ImportFormat, file: &Path) -> String {
        let (q, key) = (super::toml_string, super::toml_key);
        let comment = |s: &str| s.replace('\n', " ");
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# Imported by `etl mapping import --from {}` from the {} model `{}`.",
            format.name(),
            format.library(),
            comment(&file.display().to_string())
        );
        for n in &self.notes {
            let _ = writeln!(out, "# {}", comment(n));
        }
        let unsupported: Vec<String> = self.warnings();
        if !unsupported.is_empty() {
            let _ =
                writeln!(out, "#\n# Not carried over (no equivalent in a mapping; the attributes stay in the data):");
            for w in &unsupported {
                let _ = writeln!(out, "# - {}", comment(w));
            }
        }
        let _ = writeln!(out, "# Check it against an export with `etl mapping check --mapping THIS_FILE EXPORT`.\n");
        if let Some(t) = &self.type_attribute {
            let _ = writeln!(out, "[settings]\ntype_attribute = {}", q(t));
        }
        for e in &self.entities {
            let _ = write!(out, "\n# {} `{}`", format.library(), comment(&e.name));
            match e.line {
                Some(l) => {
                    let _ = writeln!(out, " ({}, line {l})", comment(&file.display().to_string()));
                }
                None => out.push('\n'),
            }
            let _ = writeln!(out, "[entity.{}]", key(&e.name));
            let _ = writeln!(out, "table = {}", q(&e.table));
            if !e.match_values.is_empty() {
                let m: Vec<String> = e.match_values.iter().map(|v| q(v)).collect();
                let _ = writeln!(out, "match = [{}]", m.join(", "));
            }
            if !e.key_prefix.is_empty() {
                let p: Vec<String> = e.key_prefix.iter().map(|(a, p)| format!("{} = {}", key(a), q(p))).collect();
                let _ = writeln!(out, "key_prefix = {{ {} }}", p.join(", "));
            }
            if !e.keys.is_empty() {
                let k: Vec<String> = e.keys.iter().map(|(a, t)| format!("{} = {}", key(a), q(t))).collect();
                let _ = writeln!(out, "keys = {{ {} }}", k.join(", "));
            }
            if !e.drop.is_empty() {
                let d: Vec<String> = e.drop.iter().map(|v| q(v)).collect();
                let _ = writeln!(out, "drop = [{}]", d.join(", "));
            }
            let _ = writeln!(out, "columns = [");
            for c in &e.columns {
                let mut parts = vec![format!("name = {}", q(&c.name))];
                if let Some(s) = &c.source {
                    parts.push(format!("source = {}", q(s)));
                }
                if let Some(c) = &c.copy {
                    parts.push(format!("copy = {}", q(c)));
                }
                if let Some(t) = &c.ty {
                    parts.push(format!("type = {}", q(t)));
                }
                if let Some(f) = &c.format {
                    parts.push(format!("format = {}", q(f)));
                }
                if c.required {
                    parts.push("required = true".into());
                }
                let _ = writeln!(out, "  {{ {} }},", parts.join(", "));
            }
            let _ = writeln!(out, "]");
        }
        out
    }
}

/// Adds attribute columns after the key placeholders, skipping attributes a placeholder copies
/// and column names already taken.
pub(crate) fn push_attribute_column(e: &mut EntitySpec, column: ColumnSpec, attribute: &str) {
    let copied = e.placeholders.seen.iter().any(|(name, (_, copy))| copy.as_deref().unwrap_or(name) == attribute);
    if copied {
        return;
    }
    let mut c = column;
    let taken = |n: &str, e: &EntitySpec| e.columns.iter().any(|c| c.name == n) || e.placeholders.seen.contains_key(n);
    if taken(&c.name, e) {
        let mut n = 2;
        while taken(&format!("{}_{n}", c.name), e) {
            n += 1;
        }
        c.name = format!("{}_{n}", c.name);
    }
    c.source = (c.name != attribute).then(|| attribute.to_owned());
    e.columns.push(c);
}
