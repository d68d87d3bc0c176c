//! Applying a compiled mapping to one item: key templates parsed into typed columns, attributes
//! renamed and coerced to their declared types, child rows exploded from lists of maps, and
//! unmapped attributes kept in `_extra`, dropped or refused.
//!
//! The output rows are [`Item`]s whose attribute names are the table's column names and whose
//! values are already in the form the column builders take (timestamps as epoch integers in
//! the column's unit, dates as day numbers, decimals checked against precision and scale), so
//! writing cannot fail on them. Every problem is a [`Failure`] naming the attribute, the value
//! and the expected form; the entity's [`ErrorPolicy`] decides whether it rejects the item or
//! leaves a null. A missing required value always rejects the item.

use std::borrow::Cow;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, TimeZone as _};

use super::RejectReason;
use crate::decode::{Item, Number, Value, same_name};
use crate::mapping::template::{Captures, KeyValue, TimeUnit};
use crate::mapping::{
    ChildMapping, ColumnMapping, ColumnSource, DeclaredType, EntityMapping, ErrorPolicy, Mapping, TimestampFormat,
    UnmappedPolicy,
};
use crate::schema::{Column, ColumnType, SetKind, StructField, TableSchema, TsUnit};

/// The column holding unmapped attributes as DynamoDB JSON.
pub const EXTRA_COLUMN: &str = "_extra";

/// Why a value or a key did not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FailureKind {
    KeyTemplate,
    KeyConflict,
    Coercion,
    Required,
    Unmapped,
}

impl FailureKind {
    /// The kind as the run report counts it.
    pub fn label(self) -> &'static str {
        self.reason().code()
    }

    pub fn reason(self) -> RejectReason {
        match self {
            FailureKind::KeyTemplate => RejectReason::KeyTemplate,
            FailureKind::KeyConflict => RejectReason::KeyConflict,
            FailureKind::Coercion => RejectReason::Coercion,
            FailureKind::Required => RejectReason::Required,
            FailureKind::Unmapped => RejectReason::UnmappedAttribute,
        }
    }
}

/// One problem with one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    /// The attribute path (`SK`, `total`, `lines[2].qty`).
    pub attribute: String,
    pub message: String,
}

/// The rows one item gives.
#[derive(Debug, Default)]
pub struct Applied<'a> {
    pub row: Item<'a>,
    /// `(index into the entity's children, row)`, in element order.
    pub children: Vec<(usize, Item<'a>)>,
    /// Problems left as nulls under [`ErrorPolicy::Null`].
    pub nulled: Vec<Failure>,
    /// Attributes no column names (whatever the policy did with them).
    pub unmapped: Vec<String>,
}

/// Which entity of a mapping an item belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'i> {
    /// Index into [`Mapping::entities`].
    Entity(usize),
    /// The item's type value, which no entity matches.
    Unmatched(&'i str),
    /// No type value and no entity's `key_prefix` matches.
    NoType,
}

/// Routes an item: by its type value, or by key prefixes when it has none.
pub fn route<'i>(m: &Mapping, item: &'i Item<'_>) -> Route<'i> {
    match item.iter().find(|(k, _)| same_name(k, &m.type_attribute)).map(|(_, v)| v) {
        Some(Value::S(t)) => match m.entities.iter().position(|e| e.match_types.iter().any(|x| x == t.as_ref())) {
            Some(i) => Route::Entity(i),
            None => Route::Unmatched(t.as_ref()),
        },
        _ => m
            .entities
            .iter()
            .position(|e| {
                !e.key_prefix.is_empty()
                    && e.key_prefix.iter().all(|(attr, prefix)| {
                        item.iter().any(|(k, v)| {
                            k == attr.as_str() && matches!(v, Value::S(s) if s.starts_with(prefix.as_str()))
                        })
                    })
            })
            .map_or(Route::NoType, Route::Entity),
    }
}

/// Applies `m` to `item`. `Err` means the item goes to the rejects table.
///
/// The row borrows from the item and the mapping: text a key template captures goes into its
/// column without a copy.
pub fn apply<'a>(m: &'a EntityMapping, item: &'a Item<'a>, type_attribute: &str) -> Result<Applied<'a>, Failure> {
    // Room for every column and `_extra`: the row never reallocates.
    let mut out = Applied { row: Vec::with_capacity(m.columns.len() + 1), ..Applied::default() };
    let policy = m.on_error;
    let fail = |f: Failure, out: &mut Applied<'a>| -> Result<(), Failure> {
        match policy {
            ErrorPolicy::Reject => Err(f),
            ErrorPolicy::Null => {
                out.nulled.push(f);
                Ok(())
            }
        }
    };
    // Which of the item's attributes a key, a column or a child table read (one bit each, for
    // the first 128): the search for attributes no column names skips them instead of comparing
    // each with every claimed name (that search was the most of a mapped item's time).
    let read = std::cell::Cell::new(0u128);
    let get = |name: &str| {
        let i = item.iter().position(|(k, _)| same_name(k, name))?;
        if i < 128 {
            read.set(read.get() | 1 << i);
        }
        Some(&item[i].1)
    };

    // Keys: every placeholder's value, from the first key attribute that has it.
    // `(placeholder, (value, key attribute))`, first capture of each name only: a handful of
    // entries, so a list searched in place costs less than a map built and dropped per item, and
    // is kept inline.
    let mut captured: smallvec::SmallVec<[(&str, (KeyValue<'a>, &str)); 8]> = smallvec::SmallVec::new();
    // One key's values, refilled for each key.
    let mut values = Captures::new();
    for k in &m.keys {
        let Some(v) = get(&k.attribute) else { continue }; // sparse index keys may be absent
        let text = match v {
            Value::S(s) => s.as_ref(),
            Value::N(n) => n.as_str(),
            Value::Null => continue,
            other => {
                let f = Failure {
                    kind: FailureKind::KeyTemplate,
                    attribute: k.attribute.clone(),
                    message: format!(
                        "key `{}` is a `{}` value; template `{}` reads strings",
                        k.attribute,
                        other.tag().key(),
                        k.template.source()
                    ),
                };
                fail(f, &mut out)?;
                continue;
            }
        };
        match k.template.captures_into(text, &mut values) {
            Ok(()) => {
                for (p, v) in k.template.placeholders().iter().zip(values.drain(..)) {
                    let Some(v) = v else { continue };
                    match captured_value(&captured, &p.name) {
                        Some((prev, from)) if *prev != v => {
                            let f = Failure {
                                kind: FailureKind::KeyConflict,
                                attribute: k.attribute.clone(),
                                message: format!(
                                    "`{}` in key `{}` ({}) differs from `{}` in key `{from}` ({})",
                                    p.name,
                                    k.attribute,
                                    key_value_text(&v),
                                    p.name,
                                    key_value_text(prev)
                                ),
                            };
                            fail(f, &mut out)?;
                        }
                        Some(_) => {}
                        None => {
                            captured.push((p.name.as_str(), (v, k.attribute.as_str())));
                        }
                    }
                }
            }
            Err(e) => {
                let f = Failure {
                    kind: FailureKind::KeyTemplate,
                    attribute: k.attribute.clone(),
                    message: format!("entity `{}`: {}; expected {}", m.name, e.message, e.expected),
                };
                fail(f, &mut out)?;
            }
        }
    }

    // Columns, in order.
    for c in &m.columns {
        let value = match &c.source {
            ColumnSource::Attribute(a) => match get(a).filter(|v| !matches!(v, Value::Null) || is_json(&c.ty)) {
                None => None,
                Some(v) => match coerce(v, &c.ty) {
                    // Stored as built, not moved through an `Option` first.
                    Ok(v) => {
                        push_column(&mut out.row, &c.name, v);
                        continue;
                    }
                    Err(expected) => {
                        fail(coercion_failure(&m.name, a, v, &expected), &mut out)?;
                        None
                    }
                },
            },
            ColumnSource::Key { placeholder, copy, .. } => {
                // The commonest case first: the key holds the value and the attribute holding a
                // copy agrees, which `key_agrees` checks without building the key's value. The
                // column takes the attribute's value, borrowed from the line as it was read.
                if let (Some((kv, _)), Some(a)) =
                    (captured_value(&captured, placeholder), get(copy).filter(|v| !matches!(v, Value::Null)))
                    && let Ok(v) = coerce(a, &c.ty)
                    && key_agrees(kv, &c.ty, &v)
                {
                    push_column(&mut out.row, &c.name, v);
                    continue;
                }
                let from_key = match captured_value(&captured, placeholder) {
                    Some((kv, from)) => match key_value(kv, &c.ty) {
                        Ok(v) => Some(v),
                        Err(expected) => {
                            let f = Failure {
                                kind: FailureKind::Coercion,
                                attribute: (*from).to_owned(),
                                message: format!(
                                    "entity `{}`: `{placeholder}` = `{}` from key `{from}` does not fit {expected}",
                                    m.name,
                                    key_value_text(kv)
                                ),
                            };
                            fail(f, &mut out)?;
                            None
                        }
                    },
                    None => None,
                };
                // The attribute holding a copy (by default the one named like the placeholder)
                // duplicates it: it must agree, and it fills the column when the key is absent (a
                // sparse index).
                let attr = get(copy).filter(|v| !matches!(v, Value::Null));
                // A case-folded key (`lower`/`upper`) holds a folded copy: the attribute keeps the
                // real case, so it must fold to the key's text and gives the column its value.
                let folded = match captured_value(&captured, placeholder) {
                    Some((KeyValue::Folded { case, text }, _)) => Some((*case, &**text)),
                    _ => None,
                };
                match (from_key, attr) {
                    (Some(k), Some(a)) if folded.is_some() => {
                        let agrees =
                            folded.is_some_and(|(case, text)| matches!(a, Value::S(s) if case.fold(s) == text));
                        if !agrees {
                            let f = Failure {
                                kind: FailureKind::KeyConflict,
                                attribute: copy.clone(),
                                message: format!(
                                    "entity `{}`: attribute `{copy}` ({}) does not fold to the value in the key ({})",
                                    m.name,
                                    value_text(a),
                                    value_text(&k)
                                ),
                            };
                            fail(f, &mut out)?;
                            Some(k)
                        } else {
                            coerce(a, &c.ty).ok().or(Some(k))
                        }
                    }
                    (Some(k), Some(a)) => {
                        if coerce(a, &c.ty).ok().as_ref() != Some(&k) {
                            let f = Failure {
                                kind: FailureKind::KeyConflict,
                                attribute: copy.clone(),
                                message: format!(
                                    "entity `{}`: attribute `{copy}` ({}) differs from the value in the key ({})",
                                    m.name,
                                    value_text(a),
                                    value_text(&k)
                                ),
                            };
                            fail(f, &mut out)?;
                        }
                        Some(k)
                    }
                    (Some(k), None) => Some(k),
                    (None, Some(a)) => match coerce(a, &c.ty) {
                        Ok(v) => Some(v),
                        Err(expected) => {
                            fail(coercion_failure(&m.name, copy, a, &expected), &mut out)?;
                            None
                        }
                    },
                    (None, None) => None,
                }
            }
        };
        match value {
            Some(v) => push_column(&mut out.row, &c.name, v),
            None if c.required => {
                return Err(Failure {
                    kind: FailureKind::Required,
                    attribute: source_name(c).to_owned(),
                    message: format!("entity `{}`: required column `{}` has no value", m.name, c.name),
                });
            }
            None => {}
        }
    }

    // Child rows.
    for (ci, child) in m.children.iter().enumerate() {
        let Some(list) = get(&child.source) else { continue };
        let elements = match list {
            Value::L(elements) => elements,
            Value::Null => continue,
            other => {
                let f = coercion_failure(&m.name, &child.source, other, "a list of maps (`L` of `M`)");
                fail(f, &mut out)?;
                continue;
            }
        };
        out.children.reserve(elements.len());
        for (i, e) in elements.iter().enumerate() {
            // Failures that reach here reject the item: `child_row` applied the policies.
            let parent = std::mem::take(&mut out.row);
            let row = child_row(m, child, &parent, e, i, &mut out);
            out.row = parent;
            out.children.push((ci, row?));
        }
    }

    // Attributes no column names.
    let mut extra: Vec<(Cow<'a, str>, Value<'a>)> = Vec::new();
    for (i, (k, v)) in item.iter().enumerate() {
        let was_read = i < 128 && read.get() & (1 << i) != 0;
        if was_read || k == type_attribute || claims(m, k) {
            continue;
        }
        out.unmapped.push(k.to_string());
        keep_unmapped(m.unmapped, k, v, &mut extra, || Failure {
            kind: FailureKind::Unmapped,
            attribute: k.to_string(),
            message: format!("entity `{}`: attribute `{k}` is not in the mapping (`unmapped = \"reject\"`)", m.name),
        })?;
    }
    push_extra(&mut out.row, &extra);
    Ok(out)
}

/// Pushes a column's value onto a row, each field written in place.
///
/// `row.push((name, value))` assembles the pair on the stack field by field and copies it into
/// the row in 16-byte moves that straddle those fields' stores, so none of them is forwarded from
/// the store buffer: `perf annotate` put a third of `apply`'s own time on those moves.
#[inline(always)]
fn push_column<'a>(row: &mut Item<'a>, name: &'a str, value: Value<'a>) {
    row.reserve(1);
    let len = row.len();
    // SAFETY: `reserve(1)` leaves room for an element at `len`, within the allocation; both
    // fields are written there before `set_len` makes the row cover them, and nothing between
    // can unwind.
    unsafe {
        let slot = row.as_mut_ptr().add(len);
        (&raw mut (*slot).0).write(Cow::Borrowed(name));
        (&raw mut (*slot).1).write(value);
        row.set_len(len + 1);
    }
}

/// The value captured for placeholder `name`, with the key attribute it came from.
fn captured_value<'c, 'm, 'k>(
    captured: &'c [(&str, (KeyValue<'k>, &'m str))],
    name: &str,
) -> Option<&'c (KeyValue<'k>, &'m str)> {
    captured.iter().find(|(n, _)| same_name(n, name)).map(|(_, v)| v)
}

/// Whether the entity consumes the attribute: the per-item, allocation-free form of
/// [`EntityMapping::claimed_attributes`] (a test keeps the two equal).
fn claims(m: &EntityMapping, name: &str) -> bool {
    m.keys.iter().any(|k| k.attribute == name)
        || m.columns.iter().any(|c| match &c.source {
            ColumnSource::Attribute(a) => a == name,
            ColumnSource::Key { copy, .. } => copy == name,
        })
        || m.children.iter().any(|c| c.source == name)
        || m.drop.iter().any(|d| d == name)
}

/// One child row. Values that do not fit follow the entity's `on_error` (a null and an entry in
/// `nulled`, or an `Err` that rejects the whole item); element fields no column names follow its
/// `unmapped`, like the parent's attributes; a missing required value always rejects.
fn child_row<'a>(
    m: &EntityMapping,
    child: &'a ChildMapping,
    parent: &Item<'a>,
    element: &Value<'a>,
    index: usize,
    out: &mut Applied<'a>,
) -> Result<Item<'a>, Failure> {
    // The element's path (`lines[2]`), for messages only: built when one is written.
    let path = || format!("{}[{index}]", child.source);
    let mut row: Item<'a> = Vec::with_capacity(child.parent_columns.len() + 2 + child.columns.len());
    for p in &child.parent_columns {
        if let Some((_, v)) = parent.iter().find(|(k, _)| same_name(k, p)) {
            row.push((Cow::Borrowed(p.as_str()), v.copied()));
        }
    }
    row.push((Cow::Borrowed(child.position.as_str()), position(index)));
    let no_fields = Vec::new();
    let fields = match element {
        Value::M(fields) => fields,
        other => {
            let f = coercion_failure(&m.name, &path(), other, "a map (`M`)");
            match m.on_error {
                ErrorPolicy::Reject => return Err(f),
                ErrorPolicy::Null => {
                    out.nulled.push(f);
                    &no_fields
                }
            }
        }
    };
    for c in &child.columns {
        let name = source_name(c);
        let v = fields
            .iter()
            .find(|(k, _)| same_name(k, name))
            .map(|(_, v)| v)
            .filter(|v| !matches!(v, Value::Null) || is_json(&c.ty));
        let value = match v {
            Some(v) => match coerce(v, &c.ty) {
                Ok(v) => {
                    push_column(&mut row, &c.name, v);
                    continue;
                }
                Err(expected) => {
                    let f = coercion_failure(&m.name, &format!("{}.{name}", path()), v, &expected);
                    match m.on_error {
                        ErrorPolicy::Reject => return Err(f),
                        ErrorPolicy::Null => {
                            out.nulled.push(f);
                            None
                        }
                    }
                }
            },
            None => None,
        };
        match value {
            Some(v) => push_column(&mut row, &c.name, v),
            None if c.required => {
                return Err(Failure {
                    kind: FailureKind::Required,
                    attribute: format!("{}.{name}", path()),
                    message: format!(
                        "entity `{}`: required column `{}` of `{}` has no value",
                        m.name, c.name, child.table
                    ),
                });
            }
            None => {}
        }
    }
    let mut extra: Item<'a> = Vec::new();
    for (k, v) in fields {
        if child.columns.iter().any(|c| source_name(c) == k.as_ref()) {
            continue;
        }
        out.unmapped.push(format!("{}[].{k}", child.source));
        keep_unmapped(m.unmapped, k, v, &mut extra, || Failure {
            kind: FailureKind::Unmapped,
            attribute: format!("{}.{k}", path()),
            message: format!(
                "entity `{}`: field `{k}` of `{}` has no column in `{}` (`unmapped = \"reject\"`)",
                m.name,
                path(),
                child.table
            ),
        })?;
    }
    push_extra(&mut row, &extra);
    Ok(row)
}

/// Applies the `unmapped` policy to one attribute (or element field) no column names: kept for
/// `_extra`, dropped, or `refuse`d.
#[allow(clippy::ptr_arg, reason = "cloning the `Cow` keeps a borrowed name borrowed; a `&str` would allocate")]
fn keep_unmapped<'a>(
    policy: UnmappedPolicy,
    name: &Cow<'a, str>,
    value: &Value<'a>,
    extra: &mut Item<'a>,
    refuse: impl FnOnce() -> Failure,
) -> Result<(), Failure> {
    match policy {
        UnmappedPolicy::Extra => extra.push((name.clone(), value.clone())),
        UnmappedPolicy::Drop => {}
        UnmappedPolicy::Reject => return Err(refuse()),
    }
    Ok(())
}

/// Adds the kept attributes to a row as its `_extra` column: one item in DynamoDB JSON,
/// `{"promo":{"S":"X1"}}`.
fn push_extra<'a>(row: &mut Item<'a>, extra: &Item<'a>) {
    if !extra.is_empty() {
        let mut text = String::new();
        crate::decode::write_item_json(extra, &mut text);
        row.push((Cow::Borrowed(EXTRA_COLUMN), Value::S(Cow::Owned(text))));
    }
}

fn source_name(c: &ColumnMapping) -> &str {
    match &c.source {
        ColumnSource::Attribute(a) => a,
        ColumnSource::Key { copy, .. } => copy,
    }
}

fn is_json(ty: &DeclaredType) -> bool {
    matches!(ty, DeclaredType::Json)
}

fn coercion_failure(entity: &str, attribute: &str, v: &Value<'_>, expected: &str) -> Failure {
    Failure {
        kind: FailureKind::Coercion,
        attribute: attribute.to_owned(),
        message: format!("entity `{entity}`: `{attribute}` = {} does not fit {expected}", value_text(v)),
    }
}

/// A short rendering of a value for messages: DynamoDB JSON, cut at 80 characters.
fn value_text(v: &Value<'_>) -> String {
    let mut s = String::new();
    v.write_dynamodb_json(&mut s);
    if s.chars().count() > 80 {
        let cut: String = s.chars().take(77).collect();
        format!("{cut}...")
    } else {
        s
    }
}

fn key_value_text(v: &KeyValue<'_>) -> String {
    match v {
        KeyValue::Str(s) | KeyValue::Decimal(s) | KeyValue::Folded { text: s, .. } => s.to_string(),
        KeyValue::Int(i) => i.to_string(),
        KeyValue::Timestamp { unit, value } => format!("{value} ({unit:?} since the epoch)").to_lowercase(),
        KeyValue::Date(d) => format!("day {d}"),
    }
}

fn number(text: String) -> Value<'static> {
    Value::N(Number::from_canonical_owned(text))
}

/// A child row's position in its list: the text of the first 256 is made once, not per row.
fn position(index: usize) -> Value<'static> {
    static TEXT: std::sync::LazyLock<Vec<String>> =
        std::sync::LazyLock::new(|| (0..256).map(|i: u32| i.to_string()).collect());
    match TEXT.get(index) {
        Some(t) => Value::N(Number::from_canonical(t)),
        None => number(index.to_string()),
    }
}

fn per_second(u: TimeUnit) -> i64 {
    match u {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
    }
}

/// `value` (in `from` units) in `to` units, exactly, or `None`. Also `None` for seconds that
/// do not fit the column as written: a seconds column is stored in milliseconds
/// ([`TsUnit::stored`]), so its values must fit an `i64` of milliseconds.
fn convert_epoch(value: i64, from: TimeUnit, to: TimeUnit) -> Option<i64> {
    let (f, t) = (per_second(from), per_second(to));
    let v = if t >= f {
        value.checked_mul(t / f)?
    } else {
        let d = f / t;
        (value % d == 0).then_some(value / d)?
    };
    let stored = per_second(TimeUnit::Millisecond).max(t) / t;
    v.checked_mul(stored).map(|_| v)
}

/// Whether `key_value(kv, ty)` would be `Ok(v)`, for `v` a value of type `ty`: decided here
/// for text, whole numbers and epoch timestamps without building the key's value (a timestamp's
/// would be new text); `false` for every other pair, which the caller then builds and compares.
fn key_agrees(kv: &KeyValue<'_>, ty: &DeclaredType, v: &Value<'_>) -> bool {
    match (kv, ty, v) {
        (KeyValue::Str(s), DeclaredType::Utf8, Value::S(x)) => s == x,
        (KeyValue::Int(i), DeclaredType::Int64, Value::N(n)) => n.to_i64() == Some(*i),
        (KeyValue::Timestamp { unit, value }, DeclaredType::Timestamp { unit: to, .. }, Value::N(n)) => {
            convert_epoch(*value, *unit, *to).is_some_and(|t| n.to_i64() == Some(t))
        }
        _ => false,
    }
}

/// A key placeholder's value as a column value of type `ty` (text still borrowed from the key).
pub(super) fn key_value<'a>(kv: &KeyValue<'a>, ty: &DeclaredType) -> Result<Value<'a>, String> {
    match (kv, ty) {
        (KeyValue::Str(s) | KeyValue::Folded { text: s, .. }, DeclaredType::Utf8) => Ok(Value::S(s.clone())),
        (KeyValue::Str(s) | KeyValue::Folded { text: s, .. }, other) => coerce(&Value::S(s.clone()), other),
        (KeyValue::Int(i), DeclaredType::Utf8) => Ok(Value::S(Cow::Owned(i.to_string()))),
        (KeyValue::Int(i), other) => coerce(&number(i.to_string()), other),
        (KeyValue::Decimal(d), DeclaredType::Utf8) => Ok(Value::S(d.clone())),
        (KeyValue::Decimal(d), other) => match Number::parse(d) {
            Ok(n) => coerce(&Value::N(n.into_owned()), other),
            Err(_) => Err(ty_expected(other)),
        },
        (KeyValue::Timestamp { unit, value }, DeclaredType::Timestamp { unit: to, .. }) => {
            convert_epoch(*value, *unit, *to).map(|v| number(v.to_string())).ok_or_else(|| ty_expected(ty))
        }
        (KeyValue::Date(d), DeclaredType::Date { .. }) => Ok(number(d.to_string())),
        (_, other) => Err(ty_expected(other)),
    }
}

fn ty_expected(ty: &DeclaredType) -> String {
    format!("`{}`", ty.label())
}

/// A number from an `N`, or from an `S` holding a number.
fn numeric<'a>(v: &Value<'a>) -> Option<Number<'a>> {
    match v {
        Value::N(n) => Some(n.clone()),
        Value::S(s) => Number::parse(s.trim()).ok().map(Number::into_owned),
        _ => None,
    }
}

/// `v` as a value of type `ty`, in the form the column builders take; `Err` names the expected
/// form.
///
/// The values most columns hold (text, a whole number, a boolean, bytes, any value of a `json`
/// column) are taken here, inlined into the caller; the rest goes to [`coerce_other`]. Inlined,
/// with the row's pushes in the arms that coerced, `apply_mapped` in `benches/hot_path.rs` took
/// 11% less time than with a call per column and the value moved through an `Option`.
#[inline(always)]
pub fn coerce<'a>(v: &Value<'a>, ty: &DeclaredType) -> Result<Value<'a>, String> {
    match (ty, v) {
        (DeclaredType::Json, _)
        | (DeclaredType::Utf8, Value::S(_))
        | (DeclaredType::Bool, Value::Bool(_))
        | (DeclaredType::Binary, Value::B(_)) => Ok(v.copied()),
        (DeclaredType::Int64, Value::N(n)) if n.to_i64().is_some() => Ok(v.copied()),
        _ => coerce_other(v, ty),
    }
}

/// The whole coercion of `v` to `ty`, every pair included. [`coerce`] takes the commonest pairs
/// (text, a fitting whole number, a boolean, bytes, any `json` value) before it calls this, so the
/// arms for those pairs here run only when this is called directly; they are kept so that this
/// stays the complete definition, and `coerce_agrees_with_the_whole_coercion` checks that the two
/// give the same result on every pair.
#[inline(never)]
fn coerce_other<'a>(v: &Value<'a>, ty: &DeclaredType) -> Result<Value<'a>, String> {
    let exp = || ty_expected(ty);
    match ty {
        DeclaredType::Json => Ok(v.clone()),
        DeclaredType::Utf8 => match v {
            Value::S(_) => Ok(v.clone()),
            Value::N(n) => Ok(Value::S(Cow::Owned(n.as_str().to_owned()))),
            _ => Err("`string` (an `S` or `N` value)".into()),
        },
        DeclaredType::Bool => match v {
            Value::Bool(_) => Ok(v.clone()),
            _ => Err("`bool` (a `BOOL` value)".into()),
        },
        DeclaredType::Binary => match v {
            Value::B(_) => Ok(v.clone()),
            _ => Err("`binary` (a `B` value)".into()),
        },
        DeclaredType::Int64 => match numeric(v) {
            Some(n) if n.to_i64().is_some() => Ok(Value::N(n)),
            _ => Err("`int64` (a whole number within ±9.2E18)".into()),
        },
        DeclaredType::Decimal { precision, scale } => {
            let n = numeric(v).ok_or_else(exp)?;
            let scaled = n
                .to_i128_scaled((*scale).max(0) as u32)
                .ok_or_else(|| format!("`decimal({precision},{scale})` (at most {scale} decimal places)"))?;
            let limit = 10i128.checked_pow(u32::from(*precision)).unwrap_or(i128::MAX);
            if scaled.unsigned_abs() >= limit.unsigned_abs() {
                return Err(format!(
                    "`decimal({precision},{scale})` (at most {} digits before the point)",
                    i32::from(*precision) - i32::from(*scale)
                ));
            }
            Ok(Value::N(n))
        }
        DeclaredType::DecimalText => numeric(v).map(Value::N).ok_or_else(|| "a number".into()),
        DeclaredType::Float64 => match numeric(v) {
            Some(n) if n.as_str().parse::<f64>().is_ok_and(f64::is_finite) => Ok(Value::N(n)),
            _ => Err("`float64` (a number within ±1.8E308)".into()),
        },
        DeclaredType::Timestamp { unit, format, tz } => {
            // A whole number of the column's own unit is the column's value as it was read: no
            // text is made for it again.
            let same_unit = match format {
                TimestampFormat::EpochS => *unit == TimeUnit::Second,
                TimestampFormat::EpochMs => *unit == TimeUnit::Millisecond,
                TimestampFormat::EpochUs => *unit == TimeUnit::Microsecond,
                TimestampFormat::Iso8601 | TimestampFormat::Pattern(_) => false,
            };
            if same_unit
                && let Value::N(n) = v
                && n.to_i64().is_some_and(|i| convert_epoch(i, *unit, *unit).is_some())
            {
                return Ok(v.copied());
            }
            timestamp(v, *unit, format, tz).map(|i| number(i.to_string()))
        }
        DeclaredType::Date { format } => {
            let Value::S(s) = v else { return Err(date_expected(format)) };
            let pattern = format.as_deref().unwrap_or("%Y-%m-%d");
            let d = NaiveDate::parse_from_str(s, pattern).map_err(|_| date_expected(format))?;
            let days = d.signed_duration_since(NaiveDate::default()).num_days();
            Ok(number(days.to_string()))
        }
        DeclaredType::List(t) => match v {
            Value::L(items) => Ok(Value::L(items.iter().map(|e| coerce(e, t)).collect::<Result<_, _>>()?)),
            _ => Err(format!("`{}` (an `L` value)", ty.label())),
        },
        DeclaredType::Set(t) => {
            let ok = match (v, t.as_ref()) {
                (Value::SS(_), DeclaredType::Utf8) | (Value::BS(_), DeclaredType::Binary) => true,
                (Value::NS(ns), t) => ns.iter().all(|n| coerce(&Value::N(n.clone()), t).is_ok()),
                _ => false,
            };
            if ok { Ok(v.clone()) } else { Err(format!("`{}` (an `SS`, `NS` or `BS` value)", ty.label())) }
        }
        DeclaredType::Struct(fields) => match v {
            Value::M(m) => {
                let mut out = Vec::with_capacity(m.len());
                for (k, x) in m {
                    let Some((_, t)) = fields.iter().find(|(n, _)| same_name(n, k)) else {
                        return Err(format!("`{}` (it has no field `{k}`)", ty.label()));
                    };
                    if matches!(x, Value::Null) && !is_json(t) {
                        continue;
                    }
                    out.push((k.clone(), coerce(x, t)?));
                }
                Ok(Value::M(out))
            }
            _ => Err(format!("`{}` (an `M` value)", ty.label())),
        },
        DeclaredType::Map(t) => match v {
            Value::M(m) => {
                Ok(Value::M(m.iter().map(|(k, x)| Ok((k.clone(), coerce(x, t)?))).collect::<Result<_, String>>()?))
            }
            _ => Err(format!("`{}` (an `M` value)", ty.label())),
        },
    }
}

fn date_expected(format: &Option<String>) -> String {
    match format {
        Some(p) => format!("`date` as `{p}`"),
        None => "`date` (`YYYY-MM-DD` text)".into(),
    }
}

/// Epoch integer in `unit` for a timestamp value written in `format`.
fn timestamp(v: &Value<'_>, unit: TimeUnit, format: &TimestampFormat, tz: &str) -> Result<i64, String> {
    let from_unit = |u: TimeUnit, name: &str| -> Result<i64, String> {
        let n = numeric(v).and_then(|n| n.to_i64()).ok_or_else(|| format!("`timestamp` as {name} (a whole number)"))?;
        convert_epoch(n, u, unit).ok_or_else(|| format!("`timestamp` as {name} within range"))
    };
    let instant = |dt: DateTime<FixedOffset>, name: &str| -> Result<i64, String> {
        let micros = dt.timestamp_micros();
        if !dt.timestamp_subsec_nanos().is_multiple_of(1000) {
            return Err(format!("`timestamp` as {name} (at most microsecond precision)"));
        }
        convert_epoch(micros, TimeUnit::Microsecond, unit)
            .ok_or_else(|| format!("`timestamp` as {name} (no more precision than the column's unit)"))
    };
    match format {
        TimestampFormat::EpochS => from_unit(TimeUnit::Second, "epoch seconds"),
        TimestampFormat::EpochMs => from_unit(TimeUnit::Millisecond, "epoch milliseconds"),
        TimestampFormat::EpochUs => from_unit(TimeUnit::Microsecond, "epoch microseconds"),
        TimestampFormat::Iso8601 => {
            let Value::S(s) = v else { return Err("`timestamp` as ISO 8601 text".into()) };
            let dt = match DateTime::parse_from_rfc3339(s) {
                Ok(dt) => dt,
                Err(_) => {
                    let naive = NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
                        .map_err(|_| "`timestamp` as ISO 8601 text (`2025-06-01T12:00:00Z`)".to_owned())?;
                    local(naive, tz)?
                }
            };
            instant(dt, "ISO 8601 text")
        }
        TimestampFormat::Pattern(p) => {
            let Value::S(s) = v else { return Err(format!("`timestamp` as `{p}` text")) };
            let dt = match DateTime::parse_from_str(s, p) {
                Ok(dt) => dt,
                Err(_) => {
                    let naive = NaiveDateTime::parse_from_str(s, p).map_err(|_| format!("`timestamp` as `{p}`"))?;
                    local(naive, tz)?
                }
            };
            instant(dt, &format!("`{p}`"))
        }
    }
}

fn local(naive: NaiveDateTime, tz: &str) -> Result<DateTime<FixedOffset>, String> {
    let offset = if tz.eq_ignore_ascii_case("UTC") {
        FixedOffset::east_opt(0)
    } else {
        DateTime::parse_from_rfc3339(&format!("2000-01-01T00:00:00{tz}")).ok().map(|d| *d.offset())
    };
    let offset = offset.ok_or_else(|| format!("a time zone (`{tz}` is not `UTC` or `+HH:MM`)"))?;
    offset.from_local_datetime(&naive).single().ok_or_else(|| "an existing local time".to_owned())
}

/// The output schema of an entity's table, exactly as the mapping declares it (plus `_extra`
/// when unmapped attributes are kept).
pub fn entity_schema(m: &EntityMapping) -> TableSchema {
    let mut columns: Vec<Column> = m
        .columns
        .iter()
        .map(|c| {
            let origin = match &c.source {
                ColumnSource::Attribute(a) => format!("{}; attribute={a}", dynamodb_label(&c.ty)),
                ColumnSource::Key { attribute, .. } => {
                    let t =
                        m.keys.iter().find(|k| &k.attribute == attribute).map(|k| k.template.source()).unwrap_or("");
                    format!("S; key={attribute} {t}")
                }
            };
            column(&c.name, &c.ty, origin)
        })
        .collect();
    if m.unmapped == UnmappedPolicy::Extra {
        columns.push(column(
            EXTRA_COLUMN,
            &DeclaredType::Utf8,
            "unmapped attributes as a DynamoDB JSON item; encoding=dynamodb-json".into(),
        ));
    }
    TableSchema { table: m.table.clone(), entity: Some(m.name.clone()), columns, extra: None }
}

/// The schema of a child table: parent columns, position, element fields.
pub fn child_schema(m: &EntityMapping, child: &ChildMapping) -> TableSchema {
    let mut columns = Vec::new();
    for p in &child.parent_columns {
        if let Some(c) = m.columns.iter().find(|c| &c.name == p) {
            columns.push(column(&c.name, &c.ty, format!("parent `{}` column", m.table)));
        }
    }
    columns.push(column(&child.position, &DeclaredType::Int64, format!("position in `{}`", child.source)));
    for c in &child.columns {
        columns.push(column(&c.name, &c.ty, format!("{}; field of `{}`", dynamodb_label(&c.ty), child.source)));
    }
    if m.unmapped == UnmappedPolicy::Extra {
        columns.push(column(
            EXTRA_COLUMN,
            &DeclaredType::Utf8,
            format!("fields of `{}` elements no column names; encoding=dynamodb-json", child.source),
        ));
    }
    TableSchema { table: child.table.clone(), entity: Some(m.name.clone()), columns, extra: None }
}

/// Per declared table, in [`super::MappedTables`]'s order, its column names borrowed from `m`:
/// the very strings [`apply`] and [`child_row`] name a row's values with, in the order of
/// [`entity_schema`] and [`child_schema`] (`row_names_are_the_tables_columns` keeps the three
/// equal), so that [`crate::pipeline::spill::column_slots`] finds a row's columns by address.
pub fn row_names(m: &Mapping) -> Vec<Vec<&str>> {
    let mut out = Vec::new();
    for e in &m.entities {
        let mut names: Vec<&str> = e.columns.iter().map(|c| c.name.as_str()).collect();
        if e.unmapped == UnmappedPolicy::Extra {
            names.push(EXTRA_COLUMN);
        }
        out.push(names);
        for child in &e.children {
            let mut names: Vec<&str> = child
                .parent_columns
                .iter()
                .filter(|p| e.columns.iter().any(|c| &c.name == *p))
                .map(String::as_str)
                .collect();
            names.push(child.position.as_str());
            names.extend(child.columns.iter().map(|c| c.name.as_str()));
            if e.unmapped == UnmappedPolicy::Extra {
                names.push(EXTRA_COLUMN);
            }
            out.push(names);
        }
    }
    out
}

fn column(name: &str, ty: &DeclaredType, origin: String) -> Column {
    Column {
        name: name.to_owned(),
        source: name.to_owned(),
        ty: column_type(ty),
        nullable: true,
        seen: [(origin, 0)].into(),
    }
}

/// The DynamoDB type a declared type reads.
fn dynamodb_label(ty: &DeclaredType) -> &'static str {
    match ty {
        DeclaredType::Int64 | DeclaredType::Decimal { .. } | DeclaredType::DecimalText | DeclaredType::Float64 => "N",
        DeclaredType::Utf8 | DeclaredType::Date { .. } => "S",
        DeclaredType::Timestamp { format, .. } => match format {
            TimestampFormat::EpochS | TimestampFormat::EpochMs | TimestampFormat::EpochUs => "N",
            _ => "S",
        },
        DeclaredType::Bool => "BOOL",
        DeclaredType::Binary => "B",
        DeclaredType::Json => "any",
        DeclaredType::List(_) => "L",
        DeclaredType::Set(t) => match t.as_ref() {
            DeclaredType::Utf8 => "SS",
            DeclaredType::Binary => "BS",
            _ => "NS",
        },
        DeclaredType::Struct(_) | DeclaredType::Map(_) => "M",
    }
}

/// The column type of a declared type.
pub fn column_type(ty: &DeclaredType) -> ColumnType {
    match ty {
        DeclaredType::Int64 => ColumnType::Int64,
        DeclaredType::Decimal { precision, scale } => ColumnType::Decimal { precision: *precision, scale: *scale },
        DeclaredType::DecimalText => ColumnType::DecimalText,
        DeclaredType::Float64 => ColumnType::Float64,
        DeclaredType::Utf8 => ColumnType::Utf8,
        DeclaredType::Bool => ColumnType::Bool,
        DeclaredType::Binary => ColumnType::Binary,
        DeclaredType::Timestamp { unit, .. } => ColumnType::Timestamp {
            unit: match unit {
                TimeUnit::Second => TsUnit::Second,
                TimeUnit::Millisecond => TsUnit::Millisecond,
                TimeUnit::Microsecond => TsUnit::Microsecond,
            },
        },
        DeclaredType::Date { .. } => ColumnType::Date,
        DeclaredType::Json => ColumnType::Json,
        DeclaredType::List(t) => ColumnType::List { element: Box::new(column_type(t)), set: None },
        DeclaredType::Set(t) => {
            let kind = match t.as_ref() {
                DeclaredType::Utf8 => SetKind::SS,
                DeclaredType::Binary => SetKind::BS,
                _ => SetKind::NS,
            };
            ColumnType::List { element: Box::new(column_type(t)), set: Some(kind) }
        }
        DeclaredType::Struct(fields) => ColumnType::Struct {
            fields: fields
                .iter()
                .map(|(n, t)| StructField {
                    name: n.clone(),
                    ty: column_type(t),
                    seen: [(dynamodb_label(t).to_owned(), 0)].into(),
                })
                .collect(),
        },
        DeclaredType::Map(t) => ColumnType::Map { value: Box::new(column_type(t)) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::json::put_line as decode_export_line;
    use crate::mapping::parse_str;

    const MAPPING: &str = r#"
[settings]
unmatched = "reject"

[entity.Event]
table = "events"
key_prefix = { PK = "EVT#" }
unmapped = "reject"
keys = { PK = "EVT#{day:date}#{seq:int(4)}", SK = "AT#{at:iso8601}" }
columns = [
  { name = "local", type = "timestamp", format = "%Y-%m-%d %H:%M", timezone = "+02:00" },
  { name = "amount", type = "decimal(5,2)" },
  { name = "ms", type = "timestamp", format = "epoch_ms" },
  { name = "props", type = "map<string, int64>" },
]
"#;

    fn mapping() -> Mapping {
        parse_str(std::path::Path::new("t.toml"), MAPPING).unwrap_or_else(|e| panic!("{e}"))
    }

    fn get<'a>(row: &'a Item<'a>, name: &str) -> Option<&'a Value<'a>> {
        row.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    fn num(v: Option<&Value<'_>>) -> String {
        match v {
            Some(Value::N(n)) => n.as_str().to_owned(),
            other => panic!("not a number: {other:?}"),
        }
    }

    #[test]
    fn key_prefix_routes_items_without_a_type_and_values_are_coerced() {
        let m = mapping();
        let line = r#"{"Item":{"PK":{"S":"EVT#2025-06-01#0042"},"SK":{"S":"AT#2025-06-01T12:00:00.250Z"},"local":{"S":"2025-06-01 14:00"},"amount":{"N":"12.5"},"ms":{"N":"1748779200250"},"props":{"M":{"a":{"N":"1"}}}}}"#;
        let item = decode_export_line(line);
        assert_eq!(route(&m, &item), Route::Entity(0));
        let a = apply(&m.entities[0], &item, "Type").unwrap();
        assert_eq!(num(get(&a.row, "day")), "20240"); // days since 1970-01-01
        assert_eq!(num(get(&a.row, "seq")), "42");
        assert_eq!(num(get(&a.row, "at")), "1748779200250000"); // microseconds
        assert_eq!(num(get(&a.row, "local")), "1748779200000000"); // 14:00 at +02:00 is 12:00 UTC
        assert_eq!(num(get(&a.row, "ms")), "1748779200250");
        assert!(a.unmapped.is_empty() && a.nulled.is_empty());
    }

    /// ElectroDB-style keys: lower-cased copies of camelCase attributes (`copy`), and
    /// OneTable-style `toISOString()` timestamps.
    #[test]
    fn folded_keys_take_the_case_from_their_copy() {
        let m = parse_str(
            std::path::Path::new("f.toml"),
            r#"
[entity.user]
keys = { pk = "$shop#userid_{user_id:lower}", sk = "$user_1#at_{at:iso8601_ms}" }
columns = [ { name = "user_id", copy = "userId", required = true } ]
"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let e = &m.entities[0];
        // (user_id, at, unmapped attributes) of one item, or its failure.
        let run = |user: &str| -> Result<(Option<String>, String, Vec<String>), Failure> {
            let line = format!(
                r#"{{"Item":{{"pk":{{"S":"$shop#userid_jdoe42"}},"sk":{{"S":"$user_1#at_2024-03-01T12:00:00.000Z"}}{user}}}}}"#
            );
            let item = decode_export_line(&line);
            let a = apply(e, &item, "Type")?;
            let user_id = match get(&a.row, "user_id") {
                Some(Value::S(s)) => Some(s.to_string()),
                _ => None,
            };
            Ok((user_id, num(get(&a.row, "at")), a.unmapped.clone()))
        };
        let (user_id, at, unmapped) = run(r#","userId":{"S":"JDoe42"}"#).unwrap();
        assert_eq!(user_id.as_deref(), Some("JDoe42"), "the attribute's case");
        assert_eq!(at, "1709294400000");
        assert!(unmapped.is_empty(), "the copy is consumed: {unmapped:?}");
        let (user_id, _, _) = run("").unwrap();
        assert_eq!(user_id.as_deref(), Some("jdoe42"), "without the copy, the key's text");
        let f = run(r#","userId":{"S":"Someone"}"#).unwrap_err();
        assert_eq!((f.kind, f.attribute.as_str()), (FailureKind::KeyConflict, "userId"));
        assert!(f.message.contains("does not fold"), "{}", f.message);
    }

    #[test]
    fn failures_name_the_attribute_and_the_form() {
        let m = mapping();
        let e = &m.entities[0];
        let base = r#""PK":{"S":"EVT#2025-06-01#0042"},"SK":{"S":"AT#2025-06-01T12:00:00Z"}"#;
        let fails = |extra: &str| {
            let line = format!(r#"{{"Item":{{{base}{extra}}}}}"#);
            let item = decode_export_line(&line);
            apply(e, &item, "Type").unwrap_err()
        };
        let f = fails(r#","amount":{"N":"1000"}"#);
        assert_eq!((f.kind, f.attribute.as_str()), (FailureKind::Coercion, "amount"));
        assert!(f.message.contains("decimal(5,2)") && f.message.contains("1000"), "{}", f.message);
        let f = fails(r#","props":{"M":{"a":{"S":"x"}}}"#);
        assert_eq!(f.kind, FailureKind::Coercion);
        let f = fails(r#","colour":{"S":"red"}"#);
        assert_eq!((f.kind, f.attribute.as_str()), (FailureKind::Unmapped, "colour"));
        let item = decode_export_line(r#"{"Item":{"PK":{"S":"EVT#2025-06-01#42"},"SK":{"S":"AT#x"}}}"#);
        let f = apply(e, &item, "Type").unwrap_err();
        assert_eq!((f.kind, f.attribute.as_str()), (FailureKind::KeyTemplate, "PK"));
    }

    #[test]
    fn unmatched_types_and_untyped_items() {
        let m = mapping();
        let item = decode_export_line(r#"{"Item":{"PK":{"S":"X#1"},"Type":{"S":"Other"}}}"#);
        assert_eq!(route(&m, &item), Route::Unmatched("Other"));
        let item = decode_export_line(r#"{"Item":{"PK":{"S":"X#1"}}}"#);
        assert_eq!(route(&m, &item), Route::NoType);
    }

    #[test]
    fn claims_agrees_with_claimed_attributes() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("mappings/ecommerce.toml");
        let m = parse_str(&path, &std::fs::read_to_string(&path).unwrap()).unwrap();
        for e in &m.entities {
            let claimed = e.claimed_attributes();
            let mut names: Vec<&str> = claimed.iter().copied().collect();
            names.extend(["nope", "Type", "lines[0]", ""]);
            for n in names {
                assert_eq!(claims(e, n), claimed.contains(n), "{} {n}", e.name);
            }
        }
    }

    const ORDERS: &str = r#"
[settings]
unmapped = "UNMAPPED"
on_error = "ON_ERROR"

[entity.Order]
table = "orders"
keys = { PK = "ORDER#{order_id}" }
columns = [{ name = "status", type = "string" }]

[[entity.Order.children]]
table = "lines"
source = "lines"
columns = [{ name = "sku", type = "string", required = true }, { name = "qty", type = "int64" }]
"#;

    /// (child rows as `name=value` text, nulled attributes, unmapped names), or the failure.
    type Summary = Result<(Vec<String>, Vec<String>, Vec<String>), (FailureKind, String)>;

    fn child_rows(unmapped: &str, on_error: &str) -> Summary {
        let text = ORDERS.replace("UNMAPPED", unmapped).replace("ON_ERROR", on_error);
        let m = parse_str(std::path::Path::new("t.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
        let line = r#"{"Item":{"PK":{"S":"ORDER#O1"},"lines":{"L":[{"M":{"sku":{"S":"A"},"qty":{"N":"2"},"note":{"S":"gift"}}},{"M":{"sku":{"S":"B"},"qty":{"N":"1.5"}}}]}}}"#;
        let item = decode_export_line(line);
        match apply(&m.entities[0], &item, "Type") {
            Ok(a) => {
                let rows = a
                    .children
                    .iter()
                    .map(|(_, r)| {
                        r.iter()
                            .map(|(k, v)| {
                                let mut t = String::new();
                                v.write_dynamodb_json(&mut t);
                                format!("{k}={t}")
                            })
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .collect();
                Ok((rows, a.nulled.iter().map(|f| f.attribute.clone()).collect(), a.unmapped))
            }
            Err(f) => Err((f.kind, f.attribute)),
        }
    }

    /// `row_names` lists each declared table's columns as the schemas do, and the rows `apply`
    /// makes name their values with its very strings (an `_extra` column aside: a constant),
    /// which is what lets `spill::column_slots` match them by address.
    #[test]
    fn row_names_are_the_tables_columns() {
        let ecommerce = include_str!("../../mappings/ecommerce.toml");
        let m = parse_str(std::path::Path::new("ecommerce.toml"), ecommerce).unwrap_or_else(|e| panic!("{e}"));
        let columns = |m: &Mapping| -> Vec<Vec<String>> {
            let t = super::super::MappedTables::new(m);
            t.tables.iter().map(|t| t.columns.iter().map(|c| c.name.clone()).collect()).collect()
        };
        assert_eq!(row_names(&m), columns(&m));
        for unmapped in ["drop", "extra"] {
            let text = ORDERS.replace("UNMAPPED", unmapped).replace("ON_ERROR", "reject");
            let m = parse_str(std::path::Path::new("t.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
            let names = row_names(&m);
            assert_eq!(names, columns(&m), "{unmapped}");
            let line = r#"{"Item":{"PK":{"S":"ORDER#O1"},"status":{"S":"new"},"x":{"N":"1"},"lines":{"L":[{"M":{"sku":{"S":"A"},"qty":{"N":"2"},"note":{"S":"gift"}}}]}}}"#;
            let item = decode_export_line(line);
            let a = apply(&m.entities[0], &item, "Type").unwrap_or_else(|f| panic!("{f:?}"));
            let rows = std::iter::once((0, &a.row)).chain(a.children.iter().map(|(c, r)| (1 + c, r)));
            let mut named = 0;
            for (table, row) in rows {
                for (k, _) in row.iter().filter(|(k, _)| k != EXTRA_COLUMN) {
                    let same = |n: &&str| std::ptr::eq(n.as_ptr(), k.as_ptr()) && n.len() == k.len();
                    assert!(names[table].iter().any(same), "`{k}` of table {table} ({unmapped})");
                    named += 1;
                }
            }
            // order_id and status; order_id, the position, sku and qty.
            assert_eq!(named, 6, "{unmapped}");
        }
    }

    /// Positions are written from a table for the first 256 elements and formatted past it.
    #[test]
    fn child_positions_count_every_element() {
        let text = ORDERS.replace("UNMAPPED", "drop").replace("ON_ERROR", "reject");
        let m = parse_str(std::path::Path::new("t.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
        let elements: Vec<String> = (0..300).map(|i| format!(r#"{{"M":{{"sku":{{"S":"S{i}"}}}}}}"#)).collect();
        let line = format!(r#"{{"Item":{{"PK":{{"S":"ORDER#O1"}},"lines":{{"L":[{}]}}}}}}"#, elements.join(","));
        let item = decode_export_line(&line);
        let a = apply(&m.entities[0], &item, "Type").unwrap_or_else(|f| panic!("{f:?}"));
        assert_eq!(a.children.len(), 300);
        for (i, (_, row)) in a.children.iter().enumerate() {
            assert_eq!(num(get(row, "position")), i.to_string());
            assert_eq!(get(row, "sku"), Some(&Value::S(Cow::Owned(format!("S{i}")))));
        }
    }

    #[test]
    fn child_rows_follow_the_entity_policies() {
        // `null`: the bad `qty` becomes a null in its row; the unmapped field goes to `_extra`.
        let (rows, nulled, unmapped) = child_rows("extra", "null").unwrap();
        assert_eq!(
            rows,
            [
                r#"order_id={"S":"O1"} position={"N":"0"} sku={"S":"A"} qty={"N":"2"} _extra={"S":"{\"note\":{\"S\":\"gift\"}}"}"#,
                r#"order_id={"S":"O1"} position={"N":"1"} sku={"S":"B"}"#,
            ]
        );
        assert_eq!(nulled, ["lines[1].qty"]);
        assert_eq!(unmapped, ["lines[].note"]);
        // `reject`: the bad value rejects the whole item.
        assert_eq!(child_rows("drop", "reject"), Err((FailureKind::Coercion, "lines[1].qty".into())));
        // `unmapped = "reject"`: so does the unmapped field.
        assert_eq!(child_rows("reject", "null"), Err((FailureKind::Unmapped, "lines[0].note".into())));
    }

    #[test]
    fn epoch_units_convert_exactly() {
        assert_eq!(convert_epoch(5, TimeUnit::Second, TimeUnit::Millisecond), Some(5000));
        assert_eq!(convert_epoch(5000, TimeUnit::Millisecond, TimeUnit::Second), Some(5));
        assert_eq!(convert_epoch(5001, TimeUnit::Millisecond, TimeUnit::Second), None);
        assert_eq!(convert_epoch(i64::MAX, TimeUnit::Second, TimeUnit::Microsecond), None);
        // Seconds are stored as milliseconds: they must fit that.
        let max_s = i64::MAX / 1000;
        assert_eq!(convert_epoch(max_s, TimeUnit::Second, TimeUnit::Second), Some(max_s));
        assert_eq!(convert_epoch(max_s + 1, TimeUnit::Second, TimeUnit::Second), None);
        assert_eq!(convert_epoch(-max_s - 1, TimeUnit::Second, TimeUnit::Second), None);
        assert_eq!(convert_epoch(i64::MAX, TimeUnit::Millisecond, TimeUnit::Millisecond), Some(i64::MAX));
    }

    /// A timestamp column reading epoch numbers of its own unit keeps the number as read; that
    /// gives exactly what converting it through `timestamp` gives, in range or not.
    #[test]
    fn epoch_numbers_of_the_column_unit_are_kept_as_read() {
        let formats = [TimestampFormat::EpochS, TimestampFormat::EpochMs, TimestampFormat::EpochUs];
        let units = [TimeUnit::Second, TimeUnit::Millisecond, TimeUnit::Microsecond];
        let numbers =
            ["0", "-1", "1736403705", "1736403705123", "9223372036854775807", "9223372036854", "12.5", "1E+30"];
        let mut kept = 0;
        for format in &formats {
            for unit in units {
                let ty = DeclaredType::Timestamp { unit, format: format.clone(), tz: "UTC".into() };
                for t in numbers {
                    let v = Value::N(Number::parse(t).unwrap_or_else(|e| panic!("{t}: {e:?}")));
                    let slow = timestamp(&v, unit, format, "UTC").map(|i| number(i.to_string()));
                    let got = coerce_other(&v, &ty);
                    assert_eq!(got, slow, "{t} as {format:?} into {unit:?}");
                    kept += usize::from(got.as_ref().is_ok_and(|g| matches!(g, Value::N(n) if n.is_borrowed())));
                }
            }
        }
        // Some numbers took the path that keeps them (the parsed numbers borrow their text).
        assert!(kept >= 6, "{kept}");
    }

    /// `key_agrees` decides for text, whole numbers and epoch timestamps exactly what building
    /// the key's value and comparing it would, and never agrees elsewhere.
    #[test]
    fn key_agrees_is_key_value_equality() {
        let n = |t: &'static str| Value::N(Number::parse(t).unwrap_or_else(|e| panic!("{t}: {e:?}")));
        let kvs = [
            KeyValue::Str(Cow::Borrowed("ORD-1")),
            KeyValue::Str(Cow::Borrowed("17")),
            KeyValue::Int(17),
            KeyValue::Int(-3),
            KeyValue::Timestamp { unit: TimeUnit::Second, value: 1_736_403_705 },
            KeyValue::Timestamp { unit: TimeUnit::Millisecond, value: 1_736_403_705_000 },
            KeyValue::Timestamp { unit: TimeUnit::Millisecond, value: 1_736_403_705_001 },
            KeyValue::Decimal(Cow::Borrowed("17")),
            KeyValue::Date(20_000),
            KeyValue::Folded { case: crate::mapping::template::Case::Lower, text: Cow::Borrowed("ord-1") },
        ];
        let values = [
            Value::S("ORD-1".into()),
            Value::S("ord-1".into()),
            Value::S("17".into()),
            n("17"),
            n("-3"),
            n("17.5"),
            n("1736403705"),
            n("1736403705000"),
            n("1736403705001"),
            n("20000"),
        ];
        let types = [
            DeclaredType::Utf8,
            DeclaredType::Int64,
            DeclaredType::DecimalText,
            DeclaredType::Timestamp { unit: TimeUnit::Second, format: TimestampFormat::EpochS, tz: "UTC".into() },
            DeclaredType::Timestamp { unit: TimeUnit::Millisecond, format: TimestampFormat::EpochMs, tz: "UTC".into() },
            DeclaredType::Date { format: None },
        ];
        let mut agreed = 0;
        for kv in &kvs {
            for ty in &types {
                let built = key_value(kv, ty);
                for v in &values {
                    let decided = matches!(
                        (kv, ty),
                        (KeyValue::Str(_), DeclaredType::Utf8)
                            | (KeyValue::Int(_), DeclaredType::Int64)
                            | (KeyValue::Timestamp { .. }, DeclaredType::Timestamp { .. })
                    ) && matches!(
                        (ty, v),
                        (DeclaredType::Utf8, Value::S(_))
                            | (DeclaredType::Int64 | DeclaredType::Timestamp { .. }, Value::N(_))
                    );
                    let equal = built.as_ref() == Ok(v);
                    let agrees = key_agrees(kv, ty, v);
                    if decided {
                        assert_eq!(agrees, equal, "{kv:?} as {ty:?} against {v:?}");
                    } else {
                        assert!(!agrees, "{kv:?} as {ty:?} against {v:?}");
                    }
                    agreed += usize::from(agrees);
                }
            }
        }
        assert!(agreed >= 5, "{agreed}");
    }

    /// `coerce`'s inlined part gives exactly what the whole coercion gives, on every declared
    /// type against every kind of value (including numbers past `int64` and numbers as text).
    #[test]
    fn coerce_agrees_with_the_whole_coercion() {
        let n = |t: &'static str| Number::parse(t).unwrap_or_else(|e| panic!("{t}: {e:?}"));
        let values: Vec<Value<'static>> = vec![
            Value::S("text".into()),
            Value::S("42".into()),
            Value::S(" -7.50 ".into()),
            Value::S("2026-12-05".into()),
            Value::S("2026-12-05T01:02:03Z".into()),
            Value::N(n("0")),
            Value::N(n("-9223372036854775808")),
            Value::N(n("9223372036854775808")),
            Value::N(n("12.345")),
            Value::N(n("1750000000")),
            Value::N(n("99999999999999999999999999999999999999")),
            Value::B(Cow::Borrowed(b"\x00\xff")),
            Value::Bool(true),
            Value::Null,
            Value::SS(vec!["a".into(), "b".into()]),
            Value::NS(vec![n("1"), n("2.5")]),
            Value::BS(vec![Cow::Borrowed(b"x")]),
            Value::L(vec![Value::S("a".into()), Value::N(n("1"))]),
            Value::M(vec![("a".into(), Value::N(n("1"))), ("b".into(), Value::Null)]),
        ];
        let types = vec![
            DeclaredType::Int64,
            DeclaredType::Decimal { precision: 5, scale: 2 },
            DeclaredType::Decimal { precision: 38, scale: 0 },
            DeclaredType::DecimalText,
            DeclaredType::Float64,
            DeclaredType::Utf8,
            DeclaredType::Bool,
            DeclaredType::Binary,
            DeclaredType::Json,
            DeclaredType::Timestamp { unit: TimeUnit::Millisecond, format: TimestampFormat::EpochS, tz: "UTC".into() },
            DeclaredType::Timestamp { unit: TimeUnit::Second, format: TimestampFormat::Iso8601, tz: "UTC".into() },
            DeclaredType::Date { format: None },
            DeclaredType::List(Box::new(DeclaredType::Utf8)),
            DeclaredType::Set(Box::new(DeclaredType::Int64)),
            DeclaredType::Set(Box::new(DeclaredType::Utf8)),
            DeclaredType::Struct(vec![("a".into(), DeclaredType::Int64), ("b".into(), DeclaredType::Utf8)]),
            DeclaredType::Map(Box::new(DeclaredType::Int64)),
        ];
        let (mut ok, mut err) = (0, 0);
        for ty in &types {
            for v in &values {
                let whole = coerce_other(v, ty);
                assert_eq!(coerce(v, ty), whole, "{ty:?} from {v:?}");
                if whole.is_ok() { ok += 1 } else { err += 1 }
            }
        }
        // Both outcomes are compared, not only one of them.
        assert!(ok > values.len() && err > values.len(), "{ok} coerced, {err} refused");
    }
}
