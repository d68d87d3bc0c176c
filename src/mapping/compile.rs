//! The mapping compiler: TOML texts in, a fully checked [`Mapping`] out.
//!
//! Compiling is all-or-nothing: every problem in every text is collected, and either a
//! [`Mapping`] comes back or [`MappingErrors`] listing all of them, each with file, line, column,
//! entity and field. The format reference is `mappings/README.md`; the rules it states are
//! enforced here and nowhere else.
//!
//! The compiler takes texts already read (path and text): it never touches the file system (the
//! command line reads files and folders at its edge) and never sees an item. What only data can
//! tell (a key that does not match its template, an attribute disagreeing with the key
//! placeholder of the same name) is the normalizer's to check, with the [`ErrorPolicy`] chosen
//! here.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue};

use super::error::{MappingError, MappingErrorKind, MappingErrors, Source};
use super::model::{
    ChildMapping, ColumnMapping, ColumnSource, DeclaredType, EntityMapping, ErrorPolicy, KeyMapping, Mapping,
    TimestampFormat, UTC, UnmappedPolicy, UnmatchedPolicy,
};
use super::suggest::{backticked, closest, unknown_field_hint};
use super::template::{KeyTemplate, PlaceholderType, TemplateError, TimeUnit};
use super::types::parse_type;
use crate::normalize::naming::snake_case;

/// One mapping file's text, read by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappingText {
    /// Where the text came from; used in the result and in messages only.
    pub path: PathBuf,
    pub text: String,
}

/// Compiles mapping texts together, in the order given. `read_errors` are the problems the
/// caller met reading them (see [`MappingError::unreadable`]); they are reported first, with
/// the compiler's own, and make the result an error too.
pub fn compile(texts: Vec<MappingText>, read_errors: Vec<MappingError>) -> Result<Mapping, MappingErrors> {
    let sources: Vec<Source> = texts.into_iter().map(|t| Source::new(t.path, t.text)).collect();
    compile_sources(&sources, read_errors)
}

/// Compiles one mapping file's text; `file` is used in the result and in messages only.
pub fn parse_str(file: &Path, text: &str) -> Result<Mapping, MappingErrors> {
    compile_sources(&[Source::new(file.to_owned(), text.to_owned())], Vec::new())
}

// Policy names as written in mapping files.

impl UnmappedPolicy {
    const NAMES: &[(&str, UnmappedPolicy)] =
        &[("extra", UnmappedPolicy::Extra), ("drop", UnmappedPolicy::Drop), ("reject", UnmappedPolicy::Reject)];
}

impl ErrorPolicy {
    const NAMES: &[(&str, ErrorPolicy)] = &[("reject", ErrorPolicy::Reject), ("null", ErrorPolicy::Null)];
}

impl UnmatchedPolicy {
    const NAMES: &[(&str, UnmatchedPolicy)] = &[("infer", UnmatchedPolicy::Infer), ("reject", UnmatchedPolicy::Reject)];
}

// Time formats of columns.

impl DeclaredType {
    /// Whether `pred` holds for this type or any type inside it.
    fn contains(&self, pred: &dyn Fn(&DeclaredType) -> bool) -> bool {
        pred(self)
            || match self {
                DeclaredType::List(t) | DeclaredType::Set(t) | DeclaredType::Map(t) => t.contains(pred),
                DeclaredType::Struct(fields) => fields.iter().any(|(_, t)| t.contains(pred)),
                _ => false,
            }
    }

    /// Sets the format of every timestamp and date inside.
    fn apply_time(&mut self, f: &TimeFormats) {
        match self {
            DeclaredType::Timestamp { unit, format, tz } => {
                if let Some((u, fm, z)) = &f.timestamp {
                    (*unit, *format, *tz) = (*u, fm.clone(), z.clone());
                }
            }
            DeclaredType::Date { format } => format.clone_from(&f.date),
            DeclaredType::List(t) | DeclaredType::Set(t) | DeclaredType::Map(t) => t.apply_time(f),
            DeclaredType::Struct(fields) => fields.iter_mut().for_each(|(_, t)| t.apply_time(f)),
            _ => {}
        }
    }
}

/// A column's `format` and `timezone`, resolved: unit, format and zone for its timestamps, the
/// pattern for its dates.
#[derive(Default)]
struct TimeFormats {
    timestamp: Option<(TimeUnit, TimestampFormat, String)>,
    date: Option<String>,
}

/// Whether a type holds timestamps and dates (anywhere inside).
#[derive(Clone, Copy)]
struct TimeUse {
    timestamp: bool,
    date: bool,
}

/// The byte offset in the file of the character `char_offset` of a string value whose token
/// (quotes included) spans `span`, undoing TOML escapes in basic strings.
fn string_offset(text: &str, span: &Range<usize>, char_offset: usize) -> usize {
    let Some(raw) = text.get(span.clone()) else { return span.start };
    let (delim, basic) = if raw.starts_with("\"\"\"") {
        (3, true)
    } else if raw.starts_with("'''") {
        (3, false)
    } else if raw.starts_with('"') {
        (1, true)
    } else if raw.starts_with('\'') {
        (1, false)
    } else {
        return span.start;
    };
    let mut i = delim;
    if delim == 3 {
        // A line break right after the opening delimiter is not part of the string.
        if raw[i..].starts_with("\r\n") {
            i += 2;
        } else if raw[i..].starts_with('\n') {
            i += 1;
        }
    }
    let end = raw.len().saturating_sub(delim).max(i);
    let mut n = 0;
    while i < end && n < char_offset {
        let Some(c) = raw.get(i..).and_then(|s| s.chars().next()) else { break };
        if basic && c == '\\' {
            let next = raw.get(i + 1..).and_then(|s| s.chars().next());
            match next {
                Some('u') => (i, n) = (i + 6, n + 1),
                Some('U') => (i, n) = (i + 10, n + 1),
                Some('x') => (i, n) = (i + 4, n + 1),
                // A line-ending backslash swallows the break and the whitespace after it.
                Some(w) if delim == 3 && w.is_whitespace() => {
                    i += 1;
                    while let Some(w) = raw.get(i..).and_then(|s| s.chars().next()).filter(|w| w.is_whitespace()) {
                        i += w.len_utf8();
                    }
                }
                Some(e) => (i, n) = (i + 1 + e.len_utf8(), n + 1),
                None => i += 1,
            }
        } else {
            i += c.len_utf8();
            n += 1;
        }
    }
    span.start + i.min(end)
}

const TOP_FIELDS: &[&str] = &["settings", "entity"];
const SETTINGS_FIELDS: &[&str] = &["type_attribute", "unmapped", "on_error", "unmatched"];
pub(super) const ENTITY_FIELDS: &[&str] =
    &["table", "match", "key_prefix", "keys", "drop", "unmapped", "on_error", "columns", "children"];
const COLUMN_FIELDS: &[&str] = &["name", "source", "copy", "type", "required", "format", "timezone"];
const CHILD_FIELDS: &[&str] = &["table", "source", "position", "parent_columns", "columns"];

/// Where an error is reported: a file, and the entity being read.
#[derive(Clone, Copy)]
struct Scope<'a> {
    file: usize,
    entity: Option<&'a str>,
}

struct Pending {
    file: usize,
    offset: usize,
    error: MappingError,
}

struct Cx<'s> {
    sources: &'s [Source],
    errors: Vec<Pending>,
}

/// Key placeholders of an entity, in key order: name, the first key attribute holding it, type.
type Placeholders = [(String, String, PlaceholderType)];

/// What a child table needs of its parent entity.
struct Parent<'a> {
    table: &'a str,
    columns: &'a [ColumnMapping],
    placeholders: &'a Placeholders,
}

/// Where a column name comes from: written at a span and field path, or implied (described).
#[derive(Clone)]
enum Origin {
    Written(Range<usize>, String),
    Implicit(&'static str),
}

/// A setting as written in one file.
struct SettingValue {
    value: String,
    file: usize,
    span: Range<usize>,
}

#[derive(Default)]
struct Settings {
    type_attribute: Vec<SettingValue>,
    unmapped: Vec<SettingValue>,
    on_error: Vec<SettingValue>,
    unmatched: Vec<SettingValue>,
}

/// An entity compiled as far as one entity can be, with what the cross-entity checks need.
struct Draft {
    entity: EntityMapping,
    file: usize,
    name_span: Range<usize>,
    /// The `table` value, or the entity's name when the table is the default.
    table_span: Range<usize>,
    table_written: bool,
    match_spans: Vec<Range<usize>>,
    key_prefix_span: Option<Range<usize>>,
    /// Per child: the `table` value (or its `source` when the table is the default) and
    /// whether `table` was written.
    child_table_spans: Vec<(Range<usize>, bool)>,
    unmapped: Option<UnmappedPolicy>,
    on_error: Option<ErrorPolicy>,
}

fn compile_sources(sources: &[Source], mut early: Vec<MappingError>) -> Result<Mapping, MappingErrors> {
    let mut cx = Cx { sources, errors: Vec::new() };
    let mut settings = Settings::default();
    let mut drafts = Vec::new();
    let mut saw_entity = false;
    let mut unreadable = false;
    for (i, src) in sources.iter().enumerate() {
        let (doc, mut errs) = DeTable::parse_recoverable(&src.text);
        if !errs.is_empty() {
            // Later syntax errors are mostly echoes of the first; report that one only.
            errs.sort_by_key(|e| e.span().map_or(0, |s| s.start));
            let e = &errs[0];
            let span = e.span().unwrap_or(0..0);
            cx.err(
                Scope { file: i, entity: None },
                span,
                None,
                MappingErrorKind::Syntax { message: e.message().into() },
            );
            unreadable = true;
            continue;
        }
        saw_entity |= cx.document(i, doc.get_ref(), &mut settings, &mut drafts);
    }
    let mapping = cx.finish(settings, drafts);
    if !saw_entity && !unreadable && early.is_empty() && !sources.is_empty() {
        cx.errors.push(Pending {
            file: 0,
            offset: 0,
            error: MappingError {
                file: sources[0].path.clone(),
                position: None,
                entity: None,
                field: None,
                kind: MappingErrorKind::NoEntities,
                hint: Some(
                    "add an entity such as `[entity.User]` with `table = \"users\"`; see mappings/README.md".into(),
                ),
                snippet: None,
            },
        });
    }
    cx.errors.sort_by_key(|p| (p.file, p.offset));
    early.extend(cx.errors.into_iter().map(|p| p.error));
    if early.is_empty() { Ok(mapping) } else { Err(MappingErrors(early)) }
}

/// A short name for a TOML value's kind, for messages.
fn found(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

type Entry<'t, 'i> = (&'t Spanned<Cow<'i, str>>, &'t Spanned<DeValue<'i>>);

/// A table's entries in the order written (TOML maps may iterate sorted by key).
fn entries<'t, 'i>(t: &'t DeTable<'i>) -> Vec<Entry<'t, 'i>> {
    let mut v: Vec<_> = t.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v
}

fn join_field(prefix: &str, field: &str) -> String {
    if prefix.is_empty() { field.to_owned() } else { format!("{prefix}.{field}") }
}

impl<'s> Cx<'s> {
    fn err(&mut self, sc: Scope<'_>, span: Range<usize>, field: Option<String>, kind: MappingErrorKind) {
        self.err_hint(sc, span, field, kind, None);
    }

    fn err_hint(
        &mut self,
        sc: Scope<'_>,
        span: Range<usize>,
        field: Option<String>,
        kind: MappingErrorKind,
        hint: Option<String>,
    ) {
        let src = &self.sources[sc.file];
        self.errors.push(Pending {
            file: sc.file,
            offset: span.start,
            error: MappingError {
                file: src.path.clone(),
                position: Some(src.position(span.start)),
                entity: sc.entity.map(str::to_owned),
                field,
                kind,
                hint,
                snippet: Some(src.snippet(&span)),
            },
        });
    }

    fn location(&self, file: usize, offset: usize) -> String {
        self.sources[file].location(offset)
    }

    fn wrong_type(&mut self, sc: Scope<'_>, path: &str, v: &Spanned<DeValue<'_>>, expected: &'static str) {
        let field = path.rsplit('.').next().unwrap_or(path).to_owned();
        let kind = MappingErrorKind::WrongValueType { field, expected, found: found(v.get_ref()) };
        self.err(sc, v.span(), Some(path.to_owned()), kind);
    }

    fn string<'v>(&mut self, sc: Scope<'_>, path: &str, v: &'v Spanned<DeValue<'_>>) -> Option<&'v str> {
        match v.get_ref() {
            DeValue::String(s) => Some(s.as_ref()),
            _ => {
                self.wrong_type(sc, path, v, "a string");
                None
            }
        }
    }

    /// A string that must not be empty.
    fn name(&mut self, sc: Scope<'_>, path: &str, v: &Spanned<DeValue<'_>>) -> Option<String> {
        let s = self.string(sc, path, v)?;
        if s.is_empty() {
            let field = path.rsplit('.').next().unwrap_or(path).to_owned();
            self.err(sc, v.span(), Some(path.to_owned()), MappingErrorKind::Empty { field });
            return None;
        }
        Some(s.to_owned())
    }

    fn table<'v, 'i>(
        &mut self,
        sc: Scope<'_>,
        path: &str,
        v: &'v Spanned<DeValue<'i>>,
        expected: &'static str,
    ) -> Option<&'v DeTable<'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            _ => {
                self.wrong_type(sc, path, v, expected);
                None
            }
        }
    }

    fn array<'v, 'i>(
        &mut self,
        sc: Scope<'_>,
        path: &str,
        v: &'v Spanned<DeValue<'i>>,
        expected: &'static str,
    ) -> Option<&'v DeArray<'i>> {
        match v.get_ref() {
            DeValue::Array(a) => Some(a),
            _ => {
                self.wrong_type(sc, path, v, expected);
                None
            }
        }
    }

    /// An array of non-empty strings, each with its span and path; duplicates reported.
    fn string_list(&mut self, sc: Scope<'_>, path: &str, v: &Spanned<DeValue<'_>>) -> Vec<(String, Range<usize>)> {
        let mut out: Vec<(String, Range<usize>)> = Vec::new();
        let Some(arr) = self.array(sc, path, v, "an array of strings") else { return out };
        for (i, item) in arr.iter().enumerate() {
            let p = format!("{path}[{i}]");
            match item.get_ref() {
                DeValue::String(_) => {
                    if let Some(s) = self.name(sc, &p, item) {
                        if out.iter().any(|(o, _)| *o == s) {
                            let field = path.rsplit('.').next().unwrap_or(path).to_owned();
                            self.err(sc, item.span(), Some(p), MappingErrorKind::DuplicateValue { field, value: s });
                        } else {
                            out.push((s, item.span()));
                        }
                    }
                }
                _ => self.wrong_type(sc, &p, item, "a string"),
            }
        }
        out
    }

    fn bool(&mut self, sc: Scope<'_>, path: &str, v: &Spanned<DeValue<'_>>) -> Option<bool> {
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            _ => {
                self.wrong_type(sc, path, v, "`true` or `false`");
                None
            }
        }
    }

    fn choice<T: Copy>(
        &mut self,
        sc: Scope<'_>,
        path: &str,
        field: &'static str,
        v: &Spanned<DeValue<'_>>,
        names: &[(&str, T)],
    ) -> Option<T> {
        let s = self.string(sc, path, v)?;
        if let Some((_, t)) = names.iter().find(|(n, _)| *n == s) {
            return Some(*t);
        }
        let options: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
        let hint = match closest(s, &options) {
            Some(c) => format!("did you mean `{c}`? (one of {})", backticked(&options)),
            None => format!("expected one of {}", backticked(&options)),
        };
        self.err_hint(
            sc,
            v.span(),
            Some(path.to_owned()),
            MappingErrorKind::BadValue { field, value: s.into() },
            Some(hint),
        );
        None
    }

    /// Reports keys of `t` not in `allowed`.
    fn check_fields(&mut self, sc: Scope<'_>, prefix: &str, t: &DeTable<'_>, allowed: &[&str], context: &'static str) {
        for (k, _) in entries(t) {
            let key = k.get_ref().as_ref();
            if allowed.contains(&key) {
                continue;
            }
            let hint = unknown_field_hint(key, allowed, context);
            let kind = MappingErrorKind::UnknownField { field: key.to_owned(), context };
            self.err_hint(sc, k.span(), Some(join_field(prefix, key)), kind, Some(hint));
        }
    }

    /// Reads one file; returns whether it has an `entity` table with at least one entry.
    fn document(&mut self, file: usize, doc: &DeTable<'_>, settings: &mut Settings, drafts: &mut Vec<Draft>) -> bool {
        let sc = Scope { file, entity: None };
        self.check_fields(sc, "", doc, TOP_FIELDS, "the mapping's top level");
        if let Some(v) = doc.get("settings")
            && let Some(t) = self.table(sc, "settings", v, "a table (`[settings]`)")
        {
            self.check_fields(sc, "settings", t, SETTINGS_FIELDS, "`[settings]`");
            for (k, v) in entries(t) {
                let path = format!("settings.{}", k.get_ref());
                let (list, ok) = match k.get_ref().as_ref() {
                    "type_attribute" => (&mut settings.type_attribute, self.name(sc, &path, v).is_some()),
                    "unmapped" => {
                        (&mut settings.unmapped, self.choice(sc, &path, "unmapped", v, UnmappedPolicy::NAMES).is_some())
                    }
                    "on_error" => {
                        (&mut settings.on_error, self.choice(sc, &path, "on_error", v, ErrorPolicy::NAMES).is_some())
                    }
                    "unmatched" => (
                        &mut settings.unmatched,
                        self.choice(sc, &path, "unmatched", v, UnmatchedPolicy::NAMES).is_some(),
                    ),
                    _ => continue,
                };
                if ok && let DeValue::String(s) = v.get_ref() {
                    list.push(SettingValue { value: s.to_string(), file, span: v.span() });
                }
            }
        }
        let Some(v) = doc.get("entity") else { return false };
        let Some(ents) = self.table(sc, "entity", v, "a table of entities such as `[entity.User]`") else {
            return true;
        };
        for (name, v) in entries(ents) {
            let name_str = name.get_ref().as_ref();
            if name_str.is_empty() {
                self.err(sc, name.span(), None, MappingErrorKind::Empty { field: "entity name".into() });
                continue;
            }
            if let Some(d) = self.entity(file, name_str, name.span(), v) {
                drafts.push(d);
            }
        }
        !ents.is_empty()
    }

    fn entity(&mut self, file: usize, name: &str, name_span: Range<usize>, v: &Spanned<DeValue<'_>>) -> Option<Draft> {
        let sc = Scope { file, entity: Some(name) };
        let t = match v.get_ref() {
            DeValue::Table(t) => t,
            _ => {
                let kind = MappingErrorKind::WrongValueType {
                    field: format!("entity.{name}"),
                    expected: "a table",
                    found: found(v.get_ref()),
                };
                self.err(sc, v.span(), None, kind);
                return None;
            }
        };
        self.check_fields(sc, "", t, ENTITY_FIELDS, "an entity");

        let mut table_span = name_span.clone();
        let table = match t.get("table") {
            Some(v) => {
                table_span = v.span();
                let table = self.name(sc, "table", v);
                if let Some(tb) = &table {
                    self.check_table_name(sc, "table", v.span(), tb);
                }
                table
            }
            None => Some(snake_case(name)),
        };

        let mut match_types = Vec::new();
        let mut match_spans = Vec::new();
        match t.get("match") {
            Some(v) if matches!(v.get_ref(), DeValue::String(_)) => {
                if let Some(s) = self.name(sc, "match", v) {
                    match_types.push(s);
                    match_spans.push(v.span());
                }
            }
            Some(v) => {
                if matches!(v.get_ref(), DeValue::Array(_)) {
                    for (s, span) in self.string_list(sc, "match", v) {
                        match_types.push(s);
                        match_spans.push(span);
                    }
                    if v.get_ref().as_array().is_some_and(|a| a.is_empty()) {
                        self.err(sc, v.span(), Some("match".into()), MappingErrorKind::Empty { field: "match".into() });
                    }
                } else {
                    self.wrong_type(sc, "match", v, "a string or an array of strings");
                }
            }
            None => {
                match_types.push(name.to_owned());
                match_spans.push(name_span.clone());
            }
        }

        let mut key_prefix = Vec::new();
        let mut key_prefix_span = None;
        if let Some(v) = t.get("key_prefix")
            && let Some(kt) =
                self.table(sc, "key_prefix", v, "a table of attribute prefixes such as `{ PK = \"USER#\" }`")
        {
            key_prefix_span = Some(v.span());
            if kt.is_empty() {
                self.err(
                    sc,
                    v.span(),
                    Some("key_prefix".into()),
                    MappingErrorKind::Empty { field: "key_prefix".into() },
                );
            }
            for (k, pv) in entries(kt) {
                let path = format!("key_prefix.{}", k.get_ref());
                if k.get_ref().is_empty() {
                    let kind = MappingErrorKind::Empty { field: "attribute name".into() };
                    self.err(sc, k.span(), Some(path), kind);
                } else if let Some(p) = self.name(sc, &path, pv) {
                    key_prefix.push((k.get_ref().to_string(), p, pv.span()));
                }
            }
        }

        // Keys and their placeholders.
        let mut keys: Vec<KeyMapping> = Vec::new();
        // placeholder name -> (first key attribute, its type)
        let mut placeholders: Vec<(String, String, PlaceholderType)> = Vec::new();
        let mut keys_broken = false;
        if let Some(v) = t.get("keys")
            && let Some(kt) = self.table(sc, "keys", v, "a table of key templates such as `{ PK = \"USER#{email}\" }`")
        {
            for (k, tv) in entries(kt) {
                let attr = k.get_ref().to_string();
                let path = format!("keys.{attr}");
                if attr.is_empty() {
                    self.err(sc, k.span(), Some(path), MappingErrorKind::Empty { field: "attribute name".into() });
                    continue;
                }
                let Some(text) = self.string(sc, &path, tv) else { continue };
                let template = match KeyTemplate::parse(text) {
                    Ok(t) => t,
                    Err(TemplateError { offset, message, hint }) => {
                        let at = string_offset(&self.sources[file].text, &tv.span(), offset);
                        let end = string_offset(&self.sources[file].text, &tv.span(), offset + 1);
                        let kind = MappingErrorKind::BadTemplate { attribute: attr.clone(), message };
                        self.err_hint(sc, at..end, Some(path), kind, hint);
                        keys_broken = true;
                        continue;
                    }
                };
                for p in template.placeholders() {
                    let at = placeholder_span(&self.sources[file].text, &tv.span(), template.source(), &p.name);
                    if p.name.starts_with('_') {
                        let kind = MappingErrorKind::ReservedColumnName { column: p.name.clone() };
                        self.err(sc, at, Some(path.clone()), kind);
                        continue;
                    }
                    match placeholders.iter().find(|(n, _, _)| *n == p.name) {
                        Some((_, first_attr, first_ty)) => {
                            if !same_placeholder_kind(first_ty, &p.ty) {
                                let kind = MappingErrorKind::PlaceholderConflict {
                                    placeholder: p.name.clone(),
                                    attribute: attr.clone(),
                                    ty: placeholder_type_name(&p.ty),
                                    first_attribute: first_attr.clone(),
                                    first_ty: placeholder_type_name(first_ty),
                                };
                                let hint = "a placeholder in several keys is one column: give it the same type in each";
                                self.err_hint(sc, at, Some(path.clone()), kind, Some(hint.into()));
                            }
                        }
                        None => placeholders.push((p.name.clone(), attr.clone(), p.ty.clone())),
                    }
                }
                keys.push(KeyMapping { attribute: attr, template });
            }
        }
        for (attr, prefix, span) in &key_prefix {
            if let Some(k) = keys.iter().find(|k| k.attribute == *attr) {
                let lit = k.template.literal_prefix();
                if !lit.starts_with(prefix.as_str()) && !prefix.starts_with(lit) {
                    let kind = MappingErrorKind::KeyPrefixMismatch {
                        attribute: attr.clone(),
                        prefix: prefix.clone(),
                        template: k.template.source().to_owned(),
                    };
                    self.err(sc, span.clone(), Some(format!("key_prefix.{attr}")), kind);
                }
            }
        }

        // Declared columns; placeholders named in them take their position.
        let mut declared: Vec<(ColumnMapping, Origin)> = Vec::new();
        if let Some(v) = t.get("columns") {
            declared = self.columns(sc, "columns", v, &placeholders, keys_broken);
        }
        let mut columns: Vec<ColumnMapping> = Vec::new();
        let mut column_origin: Vec<Origin> = Vec::new();
        for (name, attr, ty) in &placeholders {
            if !declared.iter().any(|(c, _)| c.name == *name) {
                columns.push(ColumnMapping {
                    name: name.clone(),
                    source: ColumnSource::Key {
                        attribute: attr.clone(),
                        placeholder: name.clone(),
                        copy: name.clone(),
                    },
                    ty: DeclaredType::of_placeholder(ty),
                    required: false,
                });
                column_origin.push(Origin::Implicit("a key placeholder"));
            }
        }
        for (c, origin) in declared {
            columns.push(c);
            column_origin.push(origin);
        }
        let table_name = table.clone().unwrap_or_default();
        self.check_duplicate_columns(sc, &table_name, &columns, &column_origin);

        let mut drop: Vec<(String, Range<usize>)> = Vec::new();
        if let Some(v) = t.get("drop") {
            drop = self.string_list(sc, "drop", v);
        }

        let unmapped =
            t.get("unmapped").and_then(|v| self.choice(sc, "unmapped", "unmapped", v, UnmappedPolicy::NAMES));
        let on_error = t.get("on_error").and_then(|v| self.choice(sc, "on_error", "on_error", v, ErrorPolicy::NAMES));

        let mut children = Vec::new();
        let mut child_table_spans = Vec::new();
        if let Some(v) = t.get("children")
            && let Some(arr) = self.array(sc, "children", v, "an array of tables (`[[entity.NAME.children]]`)")
        {
            let parent = Parent { table: &table_name, columns: &columns, placeholders: &placeholders };
            for (i, cv) in arr.iter().enumerate() {
                let path = format!("children[{i}]");
                let Some(ct) = self.table(sc, &path, cv, "a table") else { continue };
                if let Some((child, span)) = self.child(sc, &path, cv.span(), ct, &parent) {
                    children.push(child);
                    child_table_spans.push((span, ct.contains_key("table")));
                }
            }
        }

        for (i, (attr, span)) in drop.iter().enumerate() {
            let reader = columns
                .iter()
                .find(|c| matches!(&c.source, ColumnSource::Attribute(a) if a == attr))
                .map(|c| format!("column `{}`", c.name))
                .or_else(|| children.iter().find(|c| c.source == *attr).map(|c| format!("child table `{}`", c.table)));
            if let Some(reader) = reader {
                let kind = MappingErrorKind::DropConflict { attribute: attr.clone(), reader };
                let hint = "remove it from `drop`, or stop reading it";
                self.err_hint(sc, span.clone(), Some(format!("drop[{i}]")), kind, Some(hint.into()));
            }
        }

        Some(Draft {
            entity: EntityMapping {
                name: name.to_owned(),
                table: table?,
                match_types,
                key_prefix: key_prefix.into_iter().map(|(a, p, _)| (a, p)).collect(),
                keys,
                columns,
                drop: drop.into_iter().map(|(d, _)| d).collect(),
                unmapped: UnmappedPolicy::default(),
                on_error: ErrorPolicy::default(),
                children,
                file: self.sources[file].path.clone(),
            },
            file,
            name_span,
            table_written: t.contains_key("table"),
            table_span,
            match_spans,
            key_prefix_span,
            child_table_spans,
            unmapped,
            on_error,
        })
    }

    fn check_table_name(&mut self, sc: Scope<'_>, path: &str, span: Range<usize>, table: &str) {
        let mut chars = table.chars();
        let valid = chars.next().is_some_and(|c| c.is_ascii_lowercase())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            let suggestion = snake_case(table);
            let mut hint = String::from(
                "table names are lowercase ASCII letters, digits and `_`, starting with a letter \
                 (names starting with `_` are etl's own)",
            );
            if suggestion != table && !suggestion.is_empty() {
                hint.push_str(&format!("; did you mean `{suggestion}`?"));
            }
            let kind = MappingErrorKind::InvalidTableName { table: table.to_owned() };
            self.err_hint(sc, span, Some(path.to_owned()), kind, Some(hint));
        }
    }

    fn check_duplicate_columns(&mut self, sc: Scope<'_>, table: &str, columns: &[ColumnMapping], origin: &[Origin]) {
        for (i, c) in columns.iter().enumerate() {
            let Some(first) = columns[..i].iter().position(|o| o.name == c.name) else { continue };
            let Some(Origin::Written(span, path)) = origin.get(i) else { continue };
            let hint = match (&columns[first].source, origin.get(first)) {
                (ColumnSource::Key { attribute, placeholder, .. }, _) => {
                    format!("the first comes from placeholder `{{{placeholder}}}` of key `{attribute}`")
                }
                (_, Some(Origin::Written(first_span, first_path))) => {
                    let p = self.sources[sc.file].position(first_span.start);
                    format!("the first is `{first_path}`, line {} column {}", p.line, p.column)
                }
                (_, Some(Origin::Implicit(what))) => format!("the first is {what}"),
                (_, None) => format!("the first is `{}`", c.name),
            };
            let kind = MappingErrorKind::DuplicateColumn { table: table.to_owned(), column: c.name.clone() };
            self.err_hint(sc, span.clone(), Some(path.clone()), kind, Some(hint));
        }
    }

    /// Reads a `columns` array; returns each column with where its name is written.
    fn columns(
        &mut self,
        sc: Scope<'_>,
        path: &str,
        v: &Spanned<DeValue<'_>>,
        placeholders: &Placeholders,
        keys_broken: bool,
    ) -> Vec<(ColumnMapping, Origin)> {
        let mut out = Vec::new();
        let Some(arr) = self.array(sc, path, v, "an array of column tables") else { return out };
        for (i, cv) in arr.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let Some(ct) = self.table(sc, &p, cv, "a table such as `{ name = \"email\", type = \"string\" }`") else {
                continue;
            };
            if let Some((c, span)) = self.column(sc, &p, cv.span(), ct, placeholders, keys_broken) {
                out.push((c, Origin::Written(span, format!("{p}.name"))));
            }
        }
        out
    }

    /// Reads one column. `keys_broken`: a key template did not compile, so a column without a
    /// type may be one of its placeholders and is not reported.
    fn column(
        &mut self,
        sc: Scope<'_>,
        path: &str,
        span: Range<usize>,
        t: &DeTable<'_>,
        placeholders: &Placeholders,
        keys_broken: bool,
    ) -> Option<(ColumnMapping, Range<usize>)> {
        self.check_fields(sc, path, t, COLUMN_FIELDS, "a column");
        let Some(nv) = t.get("name") else {
            let kind = MappingErrorKind::MissingField { field: "name", context: "column".into() };
            self.err(sc, span, Some(path.to_owned()), kind);
            return None;
        };
        let name = self.name(sc, &format!("{path}.name"), nv)?;
        if name.starts_with('_') {
            let kind = MappingErrorKind::ReservedColumnName { column: name.clone() };
            self.err(sc, nv.span(), Some(format!("{path}.name")), kind);
        }
        let required = t.get("required").and_then(|v| self.bool(sc, &format!("{path}.required"), v)).unwrap_or(false);

        if let Some((_, attr, pty)) = placeholders.iter().find(|(n, _, _)| *n == name) {
            for field in ["source", "format", "timezone"] {
                if let Some((k, _)) = t.get_key_value(field) {
                    let kind = MappingErrorKind::PlaceholderColumnField {
                        column: name.clone(),
                        attribute: attr.clone(),
                        field,
                    };
                    let hint = if field == "source" {
                        "a placeholder column reads its key; rename the placeholder or this column to read an attribute"
                            .to_owned()
                    } else {
                        format!(
                            "the placeholder type `{}` fixes how its values are written",
                            placeholder_type_name(pty)
                        )
                    };
                    self.err_hint(sc, k.span(), Some(format!("{path}.{field}")), kind, Some(hint));
                }
            }
            let implied = DeclaredType::of_placeholder(pty);
            let ty = match t.get("type") {
                None => implied,
                Some(tv) => {
                    let tpath = format!("{path}.type");
                    let (declared, _) = self.parse_type(sc, &tpath, tv, &name)?;
                    if !placeholder_accepts(pty, &declared) {
                        let kind = MappingErrorKind::IncompatibleType {
                            column: name.clone(),
                            declared: declared.label(),
                            placeholder_type: placeholder_type_name(pty),
                            attribute: attr.clone(),
                        };
                        let hint = format!(
                            "declare it {}, or leave `type` out to get `{}`",
                            placeholder_allowed_text(pty),
                            implied.label()
                        );
                        self.err_hint(sc, tv.span(), Some(tpath), kind, Some(hint));
                        return None;
                    }
                    match declared {
                        // The placeholder fixes unit and format.
                        DeclaredType::Timestamp { .. } | DeclaredType::Date { .. } => implied,
                        d => d,
                    }
                }
            };
            let copy = match t.get("copy") {
                Some(v) => self.name(sc, &format!("{path}.copy"), v)?,
                None => name.clone(),
            };
            let source = ColumnSource::Key { attribute: attr.clone(), placeholder: name.clone(), copy };
            return Some((ColumnMapping { name, source, ty, required }, nv.span()));
        }
        if let Some((k, _)) = t.get_key_value("copy") {
            let kind = MappingErrorKind::CopyWithoutKey { column: name.clone() };
            let hint = "`copy` names the attribute holding the same value as a key placeholder; to read an \
                        attribute into this column, use `source`";
            self.err_hint(sc, k.span(), Some(format!("{path}.copy")), kind, Some(hint.into()));
        }

        let source = match t.get("source") {
            Some(v) => self.name(sc, &format!("{path}.source"), v)?,
            None => name.clone(),
        };
        let Some(tv) = t.get("type") else {
            if !keys_broken {
                let kind = MappingErrorKind::MissingType { column: name.clone() };
                let hint = "add a type such as `type = \"string\"` (only key placeholders may leave it out); the \
                            type grammar is in mappings/README.md";
                self.err_hint(sc, span, Some(path.to_owned()), kind, Some(hint.into()));
            }
            return None;
        };
        let tpath = format!("{path}.type");
        let (mut ty, uses) = self.parse_type(sc, &tpath, tv, &name)?;
        let formats = self.time_format(sc, path, t, &name, &ty, uses)?;
        ty.apply_time(&formats);
        Some((ColumnMapping { name, source: ColumnSource::Attribute(source), ty, required }, nv.span()))
    }

    /// Parses a column's `type`; also says whether it holds timestamps and dates.
    fn parse_type(
        &mut self,
        sc: Scope<'_>,
        path: &str,
        v: &Spanned<DeValue<'_>>,
        column: &str,
    ) -> Option<(DeclaredType, TimeUse)> {
        let text = self.string(sc, path, v)?;
        match parse_type(text) {
            Ok(ty) => {
                let uses = TimeUse {
                    timestamp: ty.contains(&|t| matches!(t, DeclaredType::Timestamp { .. })),
                    date: ty.contains(&|t| matches!(t, DeclaredType::Date { .. })),
                };
                Some((ty, uses))
            }
            Err(p) => {
                let src_text = &self.sources[sc.file].text;
                let start = string_offset(src_text, &v.span(), p.start);
                let end = string_offset(src_text, &v.span(), p.start + p.len.max(1));
                let (kind, hint) = p.into_error(column, text);
                self.err_hint(sc, start..end, Some(path.to_owned()), kind, hint);
                None
            }
        }
    }

    /// Checks `format` and `timezone` against the type; returns the timestamp and date formats.
    fn time_format(
        &mut self,
        sc: Scope<'_>,
        path: &str,
        t: &DeTable<'_>,
        column: &str,
        ty: &DeclaredType,
        uses: TimeUse,
    ) -> Option<TimeFormats> {
        let (has_ts, has_date) = (uses.timestamp, uses.date);
        let fpath = format!("{path}.format");
        let zpath = format!("{path}.timezone");
        let format = match t.get("format") {
            Some(v) => Some((self.string(sc, &fpath, v)?.to_owned(), v.span())),
            None => None,
        };
        let mut ok = true;
        let mut ts_format = None;
        let mut date_format = None;
        if let Some((f, span)) = &format {
            if !has_ts && !has_date {
                let kind = MappingErrorKind::FormatNotApplicable { column: column.into(), ty: ty.label() };
                let hint = "only `timestamp` and `date` columns take a `format`";
                self.err_hint(sc, span.clone(), Some(fpath.clone()), kind, Some(hint.into()));
                return None;
            }
            let keyword = match f.as_str() {
                "epoch_s" => Some(TimestampFormat::EpochS),
                "epoch_ms" => Some(TimestampFormat::EpochMs),
                "epoch_us" => Some(TimestampFormat::EpochUs),
                "iso8601" => Some(TimestampFormat::Iso8601),
                _ => None,
            };
            match keyword {
                Some(_) if has_date => {
                    let kind = MappingErrorKind::DateFormat { column: column.into(), format: f.clone() };
                    let hint =
                        "date columns read `YYYY-MM-DD` without a `format`, or a strftime pattern such as `%d.%m.%Y`";
                    self.err_hint(sc, span.clone(), Some(fpath.clone()), kind, Some(hint.into()));
                    ok = false;
                }
                Some(k) => ts_format = Some(k),
                None if f.contains('%') => {
                    if let Some(reason) = pattern_problem(f, uses) {
                        let kind = MappingErrorKind::BadPattern { column: column.into(), pattern: f.clone(), reason };
                        let hint = "see https://docs.rs/chrono/latest/chrono/format/strftime/ for the directives";
                        self.err_hint(sc, span.clone(), Some(fpath.clone()), kind, Some(hint.into()));
                        ok = false;
                    } else {
                        ts_format = Some(TimestampFormat::Pattern(f.clone()));
                        date_format = Some(f.clone());
                    }
                }
                None => {
                    let kind = MappingErrorKind::UnknownTimeFormat { column: column.into(), format: f.clone() };
                    let keywords = ["epoch_s", "epoch_ms", "epoch_us", "iso8601"];
                    let hint = match closest(f, &keywords) {
                        Some(c) if has_ts => format!("did you mean `{c}`?"),
                        _ if has_ts => format!(
                            "use one of {} or a strftime pattern such as `%Y-%m-%d %H:%M:%S`",
                            backticked(&keywords)
                        ),
                        _ => "date columns take a strftime pattern such as `%d.%m.%Y`".into(),
                    };
                    self.err_hint(sc, span.clone(), Some(fpath.clone()), kind, Some(hint));
                    ok = false;
                }
            }
        } else if has_ts {
            let kind = MappingErrorKind::MissingTimeFormat { column: column.into() };
            let hint = "add `format = \"epoch_s\"`, `\"epoch_ms\"`, `\"epoch_us\"`, `\"iso8601\"` or a strftime \
                        pattern such as `\"%Y-%m-%d %H:%M:%S\"`";
            self.err_hint(
                sc,
                t.get("type").map_or(0..0, |v| v.span()),
                Some(format!("{path}.type")),
                kind,
                Some(hint.into()),
            );
            ok = false;
        }

        let mut tz = UTC.to_owned();
        if let Some(zv) = t.get("timezone") {
            let z = self.string(sc, &zpath, zv)?;
            let reason = if !has_ts {
                Some("it holds no timestamps")
            } else {
                match &ts_format {
                    Some(TimestampFormat::EpochS | TimestampFormat::EpochMs | TimestampFormat::EpochUs) => {
                        Some("epoch values are always UTC")
                    }
                    Some(TimestampFormat::Pattern(p)) if pattern_has_offset(p) => {
                        Some("its pattern reads the offset from each value")
                    }
                    _ => None,
                }
            };
            if let Some(reason) = reason {
                let kind = MappingErrorKind::TimezoneNotApplicable { column: column.into(), reason };
                self.err(sc, zv.span(), Some(zpath), kind);
                ok = false;
            } else if let Some(canonical) = parse_timezone(z) {
                tz = canonical;
            } else {
                let kind = MappingErrorKind::BadTimezone { column: column.into(), timezone: z.into() };
                let hint = "write `UTC` or a fixed offset such as `+02:00`; named zones like `Europe/Berlin` are not \
                            supported";
                self.err_hint(sc, zv.span(), Some(zpath), kind, Some(hint.into()));
                ok = false;
            }
        }
        if !ok {
            return None;
        }
        let ts = ts_format.map(|f| {
            let unit = match f {
                TimestampFormat::EpochS => TimeUnit::Second,
                TimestampFormat::EpochMs => TimeUnit::Millisecond,
                _ => TimeUnit::Microsecond,
            };
            (unit, f, tz)
        });
        Some(TimeFormats { timestamp: ts, date: date_format })
    }

    fn child(
        &mut self,
        sc: Scope<'_>,
        path: &str,
        span: Range<usize>,
        t: &DeTable<'_>,
        parent: &Parent<'_>,
    ) -> Option<(ChildMapping, Range<usize>)> {
        let Parent { table: parent_table, columns: parent_columns, placeholders } = *parent;
        self.check_fields(sc, path, t, CHILD_FIELDS, "a child table");
        let Some(sv) = t.get("source") else {
            let kind = MappingErrorKind::MissingField { field: "source", context: "child table".into() };
            let hint = "name the attribute holding the list of maps, e.g. `source = \"lines\"`";
            self.err_hint(sc, span, Some(path.to_owned()), kind, Some(hint.into()));
            return None;
        };
        let source = self.name(sc, &format!("{path}.source"), sv);
        let (table, table_span) = match t.get("table") {
            Some(v) => {
                let tb = self.name(sc, &format!("{path}.table"), v);
                if let Some(tb) = &tb {
                    self.check_table_name(sc, &format!("{path}.table"), v.span(), tb);
                }
                (tb, v.span())
            }
            None => (source.as_ref().map(|s| format!("{parent_table}_{}", snake_case(s))), sv.span()),
        };
        let position = match t.get("position") {
            Some(v) => {
                let p = self.name(sc, &format!("{path}.position"), v);
                if let Some(p) = &p
                    && p.starts_with('_')
                {
                    let kind = MappingErrorKind::ReservedColumnName { column: p.clone() };
                    self.err(sc, v.span(), Some(format!("{path}.position")), kind);
                }
                p.map(|p| (p, Origin::Written(v.span(), format!("{path}.position"))))
            }
            None => Some(("position".to_owned(), Origin::Implicit("the default `position` column"))),
        };
        let parent_cols: Vec<(String, Origin)> = match t.get("parent_columns") {
            Some(v) => {
                let ppath = format!("{path}.parent_columns");
                let list = self.string_list(sc, &ppath, v);
                if list.is_empty() && v.get_ref().as_array().is_some_and(|a| a.is_empty()) {
                    let kind = MappingErrorKind::Empty { field: "parent_columns".into() };
                    let hint = "child rows need parent columns to be joined back to their parent";
                    self.err_hint(sc, v.span(), Some(ppath.clone()), kind, Some(hint.into()));
                }
                let names: Vec<&str> = parent_columns.iter().map(|c| c.name.as_str()).collect();
                for (i, (c, cspan)) in list.iter().enumerate() {
                    if !names.contains(&c.as_str()) {
                        let kind = MappingErrorKind::UnknownParentColumn {
                            table: table.clone().unwrap_or_default(),
                            column: c.clone(),
                            parent: parent_table.to_owned(),
                        };
                        let hint = match closest(c, &names) {
                            Some(n) => format!("did you mean `{n}`?"),
                            None if names.is_empty() => "the parent table has no columns".to_owned(),
                            None => format!("the parent's columns are {}", backticked(&names)),
                        };
                        self.err_hint(sc, cspan.clone(), Some(format!("{ppath}[{i}]")), kind, Some(hint));
                    }
                }
                list.into_iter()
                    .enumerate()
                    .map(|(i, (c, s))| (c, Origin::Written(s, format!("{ppath}[{i}]"))))
                    .collect()
            }
            None => {
                if placeholders.is_empty() {
                    let kind = MappingErrorKind::NoParentColumns { table: table.clone().unwrap_or_default() };
                    let hint = "list the parent columns to copy into each row, e.g. `parent_columns = [\"order_id\"]`";
                    self.err_hint(sc, span.clone(), Some(path.to_owned()), kind, Some(hint.into()));
                }
                let implicit = Origin::Implicit("a parent column copied by default (the parent's key placeholders)");
                placeholders.iter().map(|(n, _, _)| (n.clone(), implicit.clone())).collect()
            }
        };
        let cpath = format!("{path}.columns");
        let columns = match t.get("columns") {
            Some(v) => {
                let cols = self.columns(sc, &cpath, v, &[], false);
                if v.get_ref().as_array().is_some_and(|a| a.is_empty()) {
                    self.err(sc, v.span(), Some(cpath.clone()), MappingErrorKind::Empty { field: "columns".into() });
                }
                cols
            }
            None => {
                let kind = MappingErrorKind::MissingField { field: "columns", context: "child table".into() };
                self.err(sc, span.clone(), Some(path.to_owned()), kind);
                Vec::new()
            }
        };
        let table = table?;
        let position = position?;
        // Parent columns, the position and the element's columns share one table.
        let mut all: Vec<ColumnMapping> = Vec::new();
        let mut origin: Vec<Origin> = Vec::new();
        let placeholder_col = |n: &str| ColumnMapping {
            name: n.to_owned(),
            source: ColumnSource::Attribute(n.to_owned()),
            ty: DeclaredType::Json,
            required: false,
        };
        for (n, s) in &parent_cols {
            all.push(placeholder_col(n));
            origin.push(s.clone());
        }
        all.push(placeholder_col(&position.0));
        origin.push(position.1.clone());
        for (c, o) in &columns {
            all.push(c.clone());
            origin.push(o.clone());
        }
        self.check_duplicate_columns(sc, &table, &all, &origin);
        Some((
            ChildMapping {
                table,
                source: source?,
                position: position.0,
                parent_columns: parent_cols.into_iter().map(|(c, _)| c).collect(),
                columns: columns.into_iter().map(|(c, _)| c).collect(),
            },
            table_span,
        ))
    }

    /// Cross-file checks and defaults; the mapping is only used when no error was reported.
    fn finish(&mut self, settings: Settings, drafts: Vec<Draft>) -> Mapping {
        let type_attribute = self.setting("type_attribute", &settings.type_attribute).unwrap_or("Type").to_owned();
        let unmapped = self.setting("unmapped", &settings.unmapped).map_or(UnmappedPolicy::default(), |s| {
            UnmappedPolicy::NAMES.iter().find(|(n, _)| *n == s).map_or_else(Default::default, |(_, p)| *p)
        });
        let on_error = self.setting("on_error", &settings.on_error).map_or(ErrorPolicy::default(), |s| {
            ErrorPolicy::NAMES.iter().find(|(n, _)| *n == s).map_or_else(Default::default, |(_, p)| *p)
        });
        let unmatched = self.setting("unmatched", &settings.unmatched).map_or(UnmatchedPolicy::default(), |s| {
            UnmatchedPolicy::NAMES.iter().find(|(n, _)| *n == s).map_or_else(Default::default, |(_, p)| *p)
        });

        // table -> who writes it and where
        let mut tables: BTreeMap<String, String> = BTreeMap::new();
        let mut matched: BTreeMap<String, String> = BTreeMap::new();
        let mut prefixes: Vec<(Vec<(String, String)>, String)> = Vec::new();
        let mut entities = Vec::new();
        for d in drafts {
            let sc = Scope { file: d.file, entity: Some(&d.entity.name) };
            let owner = format!("entity `{}` ({})", d.entity.name, self.location(d.file, d.name_span.start));
            // `field` is `None` for a default table name, which is not written anywhere.
            let mut claim = |cx: &mut Self, table: &str, span: &Range<usize>, field: Option<String>, owner: String| {
                if let Some(first) = tables.get(table) {
                    let kind = MappingErrorKind::DuplicateTable { table: table.to_owned(), first: first.clone() };
                    let hint = if field.is_some() {
                        "every entity and child table needs its own `table`"
                    } else {
                        "this is the default table name; set `table` to choose another"
                    };
                    cx.err_hint(sc, span.clone(), field, kind, Some(hint.into()));
                } else {
                    tables.insert(table.to_owned(), owner);
                }
            };
            let field = d.table_written.then(|| "table".to_owned());
            claim(self, &d.entity.table, &d.table_span, field, owner.clone());
            for (i, (c, (span, written))) in d.entity.children.iter().zip(&d.child_table_spans).enumerate() {
                let child_owner =
                    format!("child table of entity `{}` ({})", d.entity.name, self.location(d.file, span.start));
                let field = if *written { format!("children[{i}].table") } else { format!("children[{i}].source") };
                claim(self, &c.table, span, Some(field), child_owner);
            }
            for (i, (m, span)) in d.entity.match_types.iter().zip(&d.match_spans).enumerate() {
                if let Some(first) = matched.get(m) {
                    let kind = MappingErrorKind::DuplicateMatch { value: m.clone(), first: first.clone() };
                    let hint = "an item goes to one table only: list each type value in one entity's `match`";
                    let field = if d.match_spans.len() == 1 && *span == d.name_span {
                        None
                    } else {
                        Some(format!("match[{i}]"))
                    };
                    self.err_hint(sc, span.clone(), field, kind, Some(hint.into()));
                } else {
                    matched.insert(m.clone(), owner.clone());
                }
            }
            if let Some(span) = &d.key_prefix_span {
                let mut set = d.entity.key_prefix.clone();
                set.sort();
                if let Some((_, first)) = prefixes.iter().find(|(p, _)| *p == set) {
                    let kind = MappingErrorKind::DuplicateKeyPrefix { first: first.clone() };
                    let hint = "untyped items go to the first entity whose prefixes match; make the prefixes differ";
                    self.err_hint(sc, span.clone(), Some("key_prefix".into()), kind, Some(hint.into()));
                } else if !set.is_empty() {
                    prefixes.push((set, owner.clone()));
                }
            }
            let mut e = d.entity;
            e.unmapped = d.unmapped.unwrap_or(unmapped);
            e.on_error = d.on_error.unwrap_or(on_error);
            entities.push(e);
        }
        Mapping { files: self.sources.iter().map(|s| s.path.clone()).collect(), type_attribute, unmatched, entities }
    }

    /// The value of a setting across files; disagreements reported at the later file.
    fn setting<'v>(&mut self, name: &'static str, values: &'v [SettingValue]) -> Option<&'v str> {
        let first = values.first()?;
        for v in &values[1..] {
            if v.value != first.value {
                let kind = MappingErrorKind::SettingConflict {
                    setting: name,
                    value: v.value.clone(),
                    other: first.value.clone(),
                    other_at: self.location(first.file, first.span.start),
                };
                let hint =
                    "settings apply to every file loaded together: set each in one file only, or make them agree";
                self.err_hint(
                    Scope { file: v.file, entity: None },
                    v.span.clone(),
                    Some(format!("settings.{name}")),
                    kind,
                    Some(hint.into()),
                );
            }
        }
        Some(&first.value)
    }
}

/// Where placeholder `{name...}` starts in a template value, for messages (the whole value when
/// it cannot be found).
fn placeholder_span(text: &str, span: &Range<usize>, template: &str, name: &str) -> Range<usize> {
    let needle = format!("{{{name}");
    let found = template.match_indices(&needle).find(|(i, _)| {
        let after = template[i + needle.len()..].chars().next();
        matches!(after, Some('}' | ':'))
    });
    match found {
        Some((i, _)) => {
            let chars = template[..i].chars().count();
            let start = string_offset(text, span, chars);
            let end = string_offset(text, span, chars + needle.chars().count() + 1);
            start..end
        }
        None => span.clone(),
    }
}

fn placeholder_type_name(ty: &PlaceholderType) -> String {
    match ty {
        PlaceholderType::String => "string".into(),
        PlaceholderType::Int { width: None } => "int".into(),
        PlaceholderType::Int { width: Some(w) } => format!("int({w})"),
        PlaceholderType::Decimal => "decimal".into(),
        PlaceholderType::EpochS => "epoch_s".into(),
        PlaceholderType::EpochMs => "epoch_ms".into(),
        PlaceholderType::Iso8601 => "iso8601".into(),
        PlaceholderType::Iso8601Ms => "iso8601_ms".into(),
        PlaceholderType::Date => "date".into(),
        PlaceholderType::Uuid => "uuid".into(),
        PlaceholderType::Folded(_) => ty.to_string(),
    }
}

/// Placeholder types that give the same column; `int` widths may differ between keys.
fn same_placeholder_kind(a: &PlaceholderType, b: &PlaceholderType) -> bool {
    match (a, b) {
        (PlaceholderType::Int { .. }, PlaceholderType::Int { .. }) => true,
        _ => a == b,
    }
}

/// Declared types a placeholder column may have.
fn placeholder_accepts(pty: &PlaceholderType, declared: &DeclaredType) -> bool {
    use DeclaredType as D;
    match pty {
        PlaceholderType::String | PlaceholderType::Uuid | PlaceholderType::Folded(_) => matches!(declared, D::Utf8),
        PlaceholderType::Int { .. } => matches!(declared, D::Int64 | D::Decimal { .. } | D::DecimalText),
        PlaceholderType::Decimal => matches!(declared, D::Decimal { .. } | D::DecimalText | D::Float64),
        PlaceholderType::EpochS | PlaceholderType::EpochMs | PlaceholderType::Iso8601 | PlaceholderType::Iso8601Ms => {
            matches!(declared, D::Timestamp { .. })
        }
        PlaceholderType::Date => matches!(declared, D::Date { .. }),
    }
}

fn placeholder_allowed_text(pty: &PlaceholderType) -> &'static str {
    match pty {
        PlaceholderType::String | PlaceholderType::Uuid | PlaceholderType::Folded(_) => "`string`",
        PlaceholderType::Int { .. } => "`int64`, `decimal(p,s)` or `decimal`",
        PlaceholderType::Decimal => "`decimal`, `decimal(p,s)` or `float64`",
        PlaceholderType::EpochS | PlaceholderType::EpochMs | PlaceholderType::Iso8601 | PlaceholderType::Iso8601Ms => {
            "`timestamp`"
        }
        PlaceholderType::Date => "`date`",
    }
}

/// `UTC`, or a fixed offset `+HH:MM` / `-HH:MM` with hours up to 23.
fn parse_timezone(z: &str) -> Option<String> {
    if z == UTC {
        return Some(UTC.into());
    }
    let b = z.as_bytes();
    let digits = |r: Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let ok = b.len() == 6
        && matches!(b[0], b'+' | b'-')
        && digits(1..3)
        && b[3] == b':'
        && digits(4..6)
        && z[1..3].parse::<u8>().is_ok_and(|h| h <= 23)
        && z[4..6].parse::<u8>().is_ok_and(|m| m <= 59);
    ok.then(|| z.to_owned())
}

/// Why a strftime pattern cannot read the column's values, if it cannot.
fn pattern_problem(p: &str, uses: TimeUse) -> Option<&'static str> {
    use chrono::format::{Fixed, Item, Numeric};
    let Ok(items) = chrono::format::StrftimeItems::new(p).parse() else {
        return Some("it has an unknown or incomplete directive");
    };
    let has = |want: &dyn Fn(&Item<'_>) -> bool| items.iter().any(want);
    let whole =
        |i: &Item<'_>| matches!(i, Item::Numeric(Numeric::Timestamp, _) | Item::Fixed(Fixed::RFC2822 | Fixed::RFC3339));
    let hour = |i: &Item<'_>| whole(i) || matches!(i, Item::Numeric(Numeric::Hour | Numeric::Hour12, _));
    let year = |i: &Item<'_>| {
        whole(i)
            || matches!(
                i,
                Item::Numeric(Numeric::Year | Numeric::YearMod100 | Numeric::IsoYear | Numeric::IsoYearMod100, _)
            )
    };
    if !has(&year) {
        return Some("it reads no year");
    }
    if uses.timestamp && !has(&hour) {
        return Some("it reads no time of day (`%H`, `%I`, `%T`, ...); a `date` column holds dates alone");
    }
    None
}

fn pattern_has_offset(p: &str) -> bool {
    use chrono::format::{Fixed, Item, Numeric};
    chrono::format::StrftimeItems::new(p).any(|i| {
        matches!(
            i,
            Item::Fixed(
                Fixed::TimezoneOffset
                    | Fixed::TimezoneOffsetColon
                    | Fixed::TimezoneOffsetDoubleColon
                    | Fixed::TimezoneOffsetTripleColon
                    | Fixed::TimezoneOffsetColonZ
                    | Fixed::TimezoneOffsetZ
                    | Fixed::RFC2822
                    | Fixed::RFC3339
            ) | Item::Numeric(Numeric::Timestamp, _)
        )
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::mapping::error::Position;

    const BROKEN: &str = "tests/mappings/broken";

    /// The rendered errors of a broken fixture (paths relative to the package, as in messages).
    fn broken(name: &str) -> String {
        let rel = format!("{BROKEN}/{name}.toml");
        let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(&rel)).unwrap();
        match parse_str(Path::new(&rel), &text) {
            Ok(m) => panic!("{rel} loaded: {m:#?}"),
            Err(e) => e.to_string(),
        }
    }

    /// Reads files (relative to the package) and compiles them together, as the command line
    /// does.
    fn load(paths: &[PathBuf]) -> Result<Mapping, MappingErrors> {
        let texts = paths
            .iter()
            .map(|p| MappingText {
                path: p.clone(),
                text: fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(p)).unwrap(),
            })
            .collect();
        compile(texts, Vec::new())
    }

    fn errors(text: &str) -> Vec<MappingError> {
        parse_str(Path::new("test.toml"), text).expect_err("should not load").0
    }

    /// One line per column: `table.column: type <- source`.
    fn summary(m: &Mapping) -> String {
        let source = |s: &ColumnSource| match s {
            ColumnSource::Attribute(a) => a.clone(),
            ColumnSource::Key { attribute, placeholder, copy } if copy == placeholder => {
                format!("{attribute}{{{placeholder}}}")
            }
            ColumnSource::Key { attribute, placeholder, copy } => format!("{attribute}{{{placeholder}}}={copy}"),
        };
        let ty = |t: &DeclaredType| match t {
            DeclaredType::Timestamp { unit, format, tz } => format!("timestamp({unit:?}, {format:?}, {tz})"),
            DeclaredType::Date { format } => format!("date({format:?})"),
            t => t.label(),
        };
        let mut out = format!("type_attribute={} unmatched={:?}\n", m.type_attribute, m.unmatched);
        for e in &m.entities {
            let keys: Vec<String> = e.keys.iter().map(|k| format!("{}={}", k.attribute, k.template.source())).collect();
            out.push_str(&format!(
                "{} <- {:?} unmapped={:?} on_error={:?} keys=[{}] key_prefix={:?} drop={:?}\n",
                e.table,
                e.match_types,
                e.unmapped,
                e.on_error,
                keys.join(", "),
                e.key_prefix,
                e.drop
            ));
            for c in &e.columns {
                let req = if c.required { " required" } else { "" };
                out.push_str(&format!("  {}: {} <- {}{req}\n", c.name, ty(&c.ty), source(&c.source)));
            }
            for ch in &e.children {
                out.push_str(&format!(
                    "  child {} <- {} position={} parent_columns={:?}\n",
                    ch.table, ch.source, ch.position, ch.parent_columns
                ));
                for c in &ch.columns {
                    let req = if c.required { " required" } else { "" };
                    out.push_str(&format!("    {}: {} <- {}{req}\n", c.name, ty(&c.ty), source(&c.source)));
                }
            }
        }
        out
    }

    /// Tests that never parse a key template (no `keys` in their mappings): they pass with the
    /// template engine stubbed.
    mod without_templates {
        use super::*;

        /// Every fixture in `tests/mappings/broken/`, each with its snapshot below (the `cross_*`
        /// pair is loaded together; the `*template*`/`placeholder_*` ones need the engine).
        const FIXTURES: &[&str] = &[
            "bad_decimal",
            "bad_policy",
            "bad_template",
            "bad_type",
            "cross_a",
            "cross_b",
            "drop_conflict",
            "duplicate_column",
            "duplicate_match",
            "duplicate_table",
            "empty",
            "entity_not_table",
            "invalid_table_name",
            "key_prefix",
            "key_prefix_template",
            "many_problems",
            "parent_columns",
            "placeholder_column",
            "placeholder_conflict",
            "syntax",
            "timestamp_format",
            "unknown_fields",
            "unknown_type",
            "wrong_value_types",
        ];

        #[test]
        fn every_fixture_is_listed() {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(BROKEN);
            let mut found: Vec<String> = fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
                .collect();
            found.sort();
            assert_eq!(found, FIXTURES);
        }

        macro_rules! snapshot {
            ($($name:ident),* $(,)?) => {$(
                #[test]
                fn $name() {
                    insta::assert_snapshot!(stringify!($name), broken(stringify!($name)));
                }
            )*};
        }

        snapshot!(
            bad_decimal,
            bad_policy,
            bad_type,
            drop_conflict,
            duplicate_column,
            duplicate_match,
            duplicate_table,
            empty,
            entity_not_table,
            invalid_table_name,
            key_prefix,
            many_problems,
            parent_columns,
            syntax,
            timestamp_format,
            unknown_fields,
            unknown_type,
            wrong_value_types,
        );

        #[test]
        fn cross_file() {
            // Tests run in the package folder, so relative paths show as written.
            let paths =
                [PathBuf::from(format!("{BROKEN}/cross_a.toml")), PathBuf::from(format!("{BROKEN}/cross_b.toml"))];
            let e = load(&paths).unwrap_err();
            insta::assert_snapshot!("cross_file", e.to_string());
            // Each alone is fine.
            for p in &paths {
                load(std::slice::from_ref(p)).unwrap();
            }
        }

        #[test]
        fn many_problems_are_reported_in_one_run() {
            let rel = format!("{BROKEN}/many_problems.toml");
            let e = load(&[PathBuf::from(&rel)]).unwrap_err();
            let kinds: Vec<&MappingErrorKind> = e.0.iter().map(|e| &e.kind).collect();
            assert_eq!(kinds.len(), 7, "{e}");
            assert!(matches!(kinds[0], MappingErrorKind::BadValue { field: "on_error", .. }));
            assert!(matches!(kinds[1], MappingErrorKind::InvalidTableName { .. }));
            assert!(matches!(kinds[2], MappingErrorKind::UnknownType { .. }));
            assert!(matches!(kinds[3], MappingErrorKind::MissingTimeFormat { .. }));
            assert!(matches!(kinds[4], MappingErrorKind::DuplicateMatch { .. }));
            assert!(matches!(kinds[5], MappingErrorKind::UnknownField { .. }));
            assert!(matches!(kinds[6], MappingErrorKind::DecimalPrecision { precision: 50, .. }));
            let lines: Vec<usize> = e.0.iter().map(|e| e.position.unwrap().line).collect();
            assert!(lines.is_sorted(), "{lines:?}");
            assert!(e.to_string().ends_with("7 problems in the mapping; nothing was run"));
        }

        #[test]
        fn error_fields() {
            let e = errors(
                "[entity.Order]\ntable = \"orders\"\ncolumns = [\n  { name = \"total\", type = \"decimall(12,2)\" },\n]\n",
            );
            assert_eq!(e.len(), 1);
            let e = &e[0];
            assert_eq!(e.file, Path::new("test.toml"));
            assert_eq!(e.position, Some(Position { line: 4, column: 29 }));
            assert_eq!(e.entity.as_deref(), Some("Order"));
            assert_eq!(e.field.as_deref(), Some("columns[0].type"));
            assert_eq!(e.message(), "unknown type `decimall(12,2)` for column `total`");
            assert_eq!(e.hint.as_deref(), Some("did you mean `decimal(12,2)`?"));
            assert_eq!(
                e.kind,
                MappingErrorKind::UnknownType {
                    column: "total".into(),
                    name: "decimall".into(),
                    text: "decimall(12,2)".into()
                }
            );
        }

        const FULL: &str = r#"
# Everything but key templates.
[settings]
type_attribute = "kind"
unmapped = "drop"
on_error = "null"
unmatched = "reject"

[entity.OrderItem]
match = ["OrderItem", "LineItem"]
key_prefix = { PK = "ORDER#", SK = "ITEM#" }
drop = ["legacy"]
unmapped = "reject"
columns = [
  { name = "sku", type = "string", required = true },
  { name = "display_name", source = "name", type = "string" },
  { name = "signup_at", type = "timestamp", format = "epoch_s" },
  { name = "seen_ms", type = "timestamp", format = "epoch_ms" },
  { name = "seen_us", type = "timestamp", format = "epoch_us" },
  { name = "iso", type = "timestamp", format = "iso8601", timezone = "+02:00" },
  { name = "local", type = "timestamp", format = "%d.%m.%Y %H:%M", timezone = "-05:30" },
  { name = "offset", type = "timestamp", format = "%Y-%m-%d %H:%M:%S %z" },
  { name = "address", type = "struct<street: string, city: string, zip: string, country: string>" },
  { name = "tags", type = "set<string>" },
  { name = "attrs", type = " map< string ,json > " },
  { name = "price", type = "decimal( 12 , 2 )" },
  { name = "count", type = "decimal(12)" },
  { name = "big", type = "decimal" },
  { name = "weight", type = "float64" },
  { name = "payload", type = "json" },
  { name = "birthday", type = "date" },
  { name = "local_day", type = "date", format = "%d.%m.%Y" },
  { name = "history", type = "list<struct<at: timestamp, `first name`: string>>", format = "epoch_ms" },
  { name = "sizes", type = "set<int64>" },
  { name = "images", type = "set<binary>" },
  { name = "ok", type = "bool" },
]

[[entity.OrderItem.children]]
source = "parts"
parent_columns = ["sku"]
columns = [ { name = "part", type = "string", required = true }, { name = "n", source = "count", type = "int64" } ]

[[entity.OrderItem.children]]
table = "item_notes"
source = "notes"
position = "idx"
parent_columns = ["sku", "display_name"]
columns = [ { name = "text", type = "string" } ]

[entity.Product]
table = "products"
on_error = "reject"
"#;

        #[test]
        fn full_mapping_compiles() {
            let m = parse_str(Path::new("full.toml"), FULL).unwrap();
            insta::assert_snapshot!("full_mapping", summary(&m));
            assert_eq!(m.files, vec![PathBuf::from("full.toml")]);
            let e = &m.entities[0];
            assert_eq!(e.name, "OrderItem");
            assert_eq!(e.table, "order_item", "the default table is the entity name in snake_case");
            assert_eq!(e.file, Path::new("full.toml"));
            assert_eq!(m.entities[1].match_types, ["Product"], "the default match is the entity name");
            assert_eq!(m.entity_for_type("LineItem").map(|e| e.table.as_str()), Some("order_item"));
            assert_eq!(m.entity_for_type("Nope"), None);
            assert_eq!(e.children[0].table, "order_item_parts");
            assert_eq!(e.children[0].position, "position");
            let claimed: Vec<&str> = e.claimed_attributes().into_iter().collect();
            assert!(claimed.contains(&"name") && claimed.contains(&"parts") && claimed.contains(&"legacy"));
            assert!(!claimed.contains(&"display_name"));
        }

        #[test]
        fn offsets_in_toml_strings_undo_escapes() {
            let check = |raw: &str, offset: usize, want: &str| {
                let text = format!("x = {raw}");
                let span = 4..text.len();
                let at = string_offset(&text, &span, offset);
                assert!(text[at..].starts_with(want), "{raw} @{offset}: {:?}", &text[at..]);
            };
            check(r#""abc{x}""#, 3, "{x}");
            check(r#""a\"b{x}""#, 3, "{x}");
            check(r#""a\\b{x}""#, 3, "{x}");
            check(r#""\u00e9\U0001F600é{x}""#, 3, "{x}");
            check(r#"'a\b{x}'"#, 3, "{x}");
            check("\"\"\"\nab{x}\"\"\"", 2, "{x}");
            check("'''\nab{x}'''", 2, "{x}");
            check("\"\"\"a\\\n    b{x}\"\"\"", 2, "{x}");
            // Past the end: the closing quote.
            check(r#""ab""#, 9, "\"");
        }

        #[test]
        fn timezones() {
            assert_eq!(parse_timezone("UTC").as_deref(), Some("UTC"));
            assert_eq!(parse_timezone("+02:00").as_deref(), Some("+02:00"));
            assert_eq!(parse_timezone("-11:30").as_deref(), Some("-11:30"));
            for bad in ["utc", "+2:00", "+24:00", "+02:60", "02:00", "+02:00:00", "Europe/Berlin", "+ü:00", ""] {
                assert_eq!(parse_timezone(bad), None, "{bad}");
            }
        }

        #[test]
        fn policies_default_and_override() {
            let m =
                parse_str(Path::new("p.toml"), "[entity.A]\n[entity.B]\nunmapped = \"reject\"\non_error = \"null\"\n")
                    .unwrap();
            assert_eq!(m.type_attribute, "Type");
            assert_eq!(m.unmatched, UnmatchedPolicy::Infer);
            assert_eq!((m.entities[0].unmapped, m.entities[0].on_error), (UnmappedPolicy::Extra, ErrorPolicy::Reject));
            assert_eq!((m.entities[1].unmapped, m.entities[1].on_error), (UnmappedPolicy::Reject, ErrorPolicy::Null));
        }

        #[test]
        fn entities_keep_the_written_order() {
            let m = parse_str(Path::new("o.toml"), "[entity.Zed]\n[entity.Alpha]\n[entity.Mid]\n").unwrap();
            let names: Vec<&str> = m.entities.iter().map(|e| e.name.as_str()).collect();
            assert_eq!(names, ["Zed", "Alpha", "Mid"]);
        }

        /// Every prefix of a valid mapping, and garbled versions of it, load or fail cleanly.
        #[test]
        fn truncated_and_garbled_mappings_do_not_panic() {
            let bounds: Vec<usize> = FULL.char_indices().map(|(i, _)| i).chain([FULL.len()]).collect();
            for &end in &bounds {
                let _ = parse_str(Path::new("t.toml"), &FULL[..end]);
            }
            for (n, &at) in bounds.iter().enumerate().step_by(3) {
                for junk in ["\"", "<", ">", "[", "]", "{", "}", ",", "=", "\\", "\n", "é", "`"] {
                    let mut s = FULL.to_owned();
                    if at < s.len() {
                        s.insert_str(at, junk);
                    }
                    let _ = parse_str(Path::new("t.toml"), &s);
                    if let Some(&next) = bounds.get(n + 1) {
                        let mut s = FULL.to_owned();
                        s.replace_range(at..next, junk);
                        let _ = parse_str(Path::new("t.toml"), &s);
                    }
                }
            }
        }

        proptest::proptest! {
            #[test]
            fn arbitrary_text_does_not_panic(text in "\\PC{0,200}") {
                let _ = parse_str(Path::new("p.toml"), &text);
            }

            #[test]
            fn arbitrary_types_do_not_panic(text in "[a-z0-9<>(),:` _-]{0,60}") {
                let doc = format!("[entity.A]\ncolumns = [{{ name = \"c\", type = {:?}, format = \"epoch_s\" }}]\n", text);
                if let Err(e) = parse_str(Path::new("p.toml"), &doc) {
                    let _ = e.to_string();
                }
            }
        }
    }

    /// Tests whose mappings have `keys`: they need the real template engine
    /// (`super::template::KeyTemplate::parse`/`placeholders`/`literal_prefix`) and panic while
    /// it is a stub.
    mod with_templates {
        use super::*;

        fn ecommerce() -> (PathBuf, String) {
            let rel = PathBuf::from("mappings/ecommerce.toml");
            let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(&rel)).unwrap();
            (rel, text)
        }

        #[test]
        fn ecommerce_loads() {
            let (rel, text) = ecommerce();
            let m = parse_str(&rel, &text).unwrap_or_else(|e| panic!("{e}"));
            insta::assert_snapshot!("ecommerce", summary(&m));
            let tables: Vec<&str> = m.entities.iter().map(|e| e.table.as_str()).collect();
            assert_eq!(tables, ["users", "orders", "order_items", "products", "reviews"]);
            let users = &m.entities[0];
            let claimed: Vec<&str> = users.claimed_attributes().into_iter().collect();
            for a in ["PK", "SK", "StatusIndexPK", "email", "status", "name", "avatar"] {
                assert!(claimed.contains(&a), "{a}: {claimed:?}");
            }
        }

        macro_rules! snapshot {
            ($($name:ident),* $(,)?) => {$(
                #[test]
                fn $name() {
                    insta::assert_snapshot!(stringify!($name), broken(stringify!($name)));
                }
            )*};
        }

        snapshot!(placeholder_conflict, placeholder_column, key_prefix_template);

        /// Shows the template engine's messages and hints: re-accept it when they change.
        #[test]
        fn bad_template_rendered() {
            insta::assert_snapshot!("bad_template", broken("bad_template"));
        }

        /// Template errors point into the TOML string, escapes undone. Checked structurally, as
        /// the messages and exact offsets are the template engine's.
        #[test]
        fn bad_template() {
            let rel = format!("{BROKEN}/bad_template.toml");
            let e = load(&[PathBuf::from(&rel)]).unwrap_err();
            let got: Vec<(&str, &str, usize)> =
                e.0.iter()
                    .map(|e| {
                        let MappingErrorKind::BadTemplate { attribute, .. } = &e.kind else { panic!("{e}") };
                        (e.entity.as_deref().unwrap(), attribute.as_str(), e.position.unwrap().line)
                    })
                    .collect();
            assert_eq!(
                got,
                [("User", "PK", 4), ("User", "SK", 4), ("Order", "PK", 8), ("Order", "SK", 9), ("Customer", "PK", 14)],
                "{e}"
            );
            let cols: Vec<usize> = e.0.iter().map(|e| e.position.unwrap().column).collect();
            // Inside each string: `"USER#{email"` spans columns 15-27, `'PROFILE#{since:epoch_sec}'`
            // 35-61, `"K\u00e9Y\t#{order_id:bogus}"` 15-43, and line 9 holds `ORDER#{x:nope}`.
            assert!((16..=27).contains(&cols[0]), "{cols:?}");
            assert!((36..=61).contains(&cols[1]), "{cols:?}");
            assert!((16..=43).contains(&cols[2]), "{cols:?}");
            assert!((1..=15).contains(&cols[3]), "{cols:?}");
        }

        #[test]
        fn key_columns_come_first_in_key_order_unless_placed() {
            let m = parse_str(
                Path::new("k.toml"),
                r#"
[entity.Order]
keys = { PK = "USER#{user_email}", SK = "ORDER#{ordered_at:epoch_s}#{order_id}", GSI1PK = "ORDER#{order_id}", GSI2PK = "SEQ#{seq:int(8)}", GSI2SK = "SEQ#{seq:int}#{amount:decimal}#{day:date}#{at:epoch_ms}#{iso:iso8601}#{id:uuid}" }
columns = [
  { name = "status", type = "string" },
  { name = "order_id", required = true },
  { name = "amount", type = "decimal(12,2)" },
]
[[entity.Order.children]]
source = "lines"
columns = [ { name = "sku", type = "string" } ]
"#,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            insta::assert_snapshot!("key_columns", summary(&m));
            let names: Vec<&str> = m.entities[0].columns.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(
                names,
                ["user_email", "ordered_at", "seq", "day", "at", "iso", "id", "status", "order_id", "amount"]
            );
            assert_eq!(
                m.entities[0].columns[8].source,
                ColumnSource::Key { attribute: "SK".into(), placeholder: "order_id".into(), copy: "order_id".into() },
                "a placeholder in several keys reads the first"
            );
            assert_eq!(
                m.entities[0].children[0].parent_columns,
                ["user_email", "ordered_at", "order_id", "seq", "amount", "day", "at", "iso", "id"],
                "by default children copy every key placeholder, in key order"
            );
        }

        #[test]
        fn copy_names_the_attribute_a_placeholder_duplicates() {
            let m = parse_str(
                Path::new("c.toml"),
                "[entity.U]\nkeys = { PK = \"U#{user_id:lower}\" }\ncolumns = [ { name = \"user_id\", copy = \"userId\" } ]\n",
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let c = &m.entities[0].columns[0];
            assert_eq!(
                c.source,
                ColumnSource::Key { attribute: "PK".into(), placeholder: "user_id".into(), copy: "userId".into() }
            );
            assert_eq!(c.ty, DeclaredType::Utf8);
            assert!(m.entities[0].claimed_attributes().contains("userId"));
            let e = errors("[entity.U]\ncolumns = [ { name = \"x\", copy = \"y\", type = \"string\" } ]\n");
            assert_eq!(e.len(), 1, "{e:?}");
            assert_eq!(e[0].kind, MappingErrorKind::CopyWithoutKey { column: "x".into() });
            assert_eq!(e[0].field.as_deref(), Some("columns[0].copy"));
        }

        /// Every prefix of the sample mapping loads or fails cleanly.
        #[test]
        fn truncated_ecommerce_does_not_panic() {
            let (rel, text) = ecommerce();
            let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
            for &end in bounds.iter().step_by(2) {
                let _ = parse_str(&rel, &text[..end]);
            }
        }
    }
}
