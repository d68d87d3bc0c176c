//! The compiled mapping: what a checked mapping file says, as types the rest of etl applies.
//!
//! Only [`super::compile`] builds these values, so every one of them is valid by construction:
//! tables are valid names, match values unique, key templates compiled, columns typed. This
//! module holds data and its small queries; it parses nothing and does no I/O.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::template::{KeyTemplate, PlaceholderType, TimeUnit};

/// A compiled, fully checked mapping: every file's entities, checked together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// The files read, in load order.
    pub files: Vec<PathBuf>,
    /// The attribute naming each item's entity (`Type` by default).
    pub type_attribute: String,
    pub unmatched: UnmatchedPolicy,
    /// Files in load order, entities in the order written.
    pub entities: Vec<EntityMapping>,
}

/// One entity: which items it takes and the table they become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntityMapping {
    /// As written after `entity.` (free text, for messages).
    pub name: String,
    /// A valid table name: `[a-z][a-z0-9_]*`.
    pub table: String,
    /// Type-attribute values routed here; never empty, unique across the mapping.
    pub match_types: Vec<String>,
    /// `(attribute, prefix)` in the order written: an item without the type attribute belongs
    /// here when every listed attribute is a string starting with its prefix. Items are tried
    /// against entities in [`Mapping::entities`] order; the first match wins.
    pub key_prefix: Vec<(String, String)>,
    /// Key templates in the order written.
    pub keys: Vec<KeyMapping>,
    /// The output columns in their final order, key-derived columns included.
    pub columns: Vec<ColumnMapping>,
    /// Attributes not kept anywhere (not even in `_extra`). A dropped key attribute is still
    /// parsed by its template.
    pub drop: Vec<String>,
    pub unmapped: UnmappedPolicy,
    pub on_error: ErrorPolicy,
    pub children: Vec<ChildMapping>,
    /// The file this entity was written in.
    pub file: PathBuf,
}

/// A key attribute and the template its values follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyMapping {
    pub attribute: String,
    pub template: KeyTemplate,
}

/// One output column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnMapping {
    pub name: String,
    pub source: ColumnSource,
    pub ty: DeclaredType,
    /// An item whose value for this column is absent or `NULL` is rejected, whatever the
    /// entity's [`ErrorPolicy`].
    pub required: bool,
}

/// Where a column's values come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnSource {
    /// The attribute of that name (in a child table: the field of the list element).
    Attribute(String),
    /// A key-template placeholder. For a placeholder in several keys, the first key that has it
    /// (the others, and the attribute holding a copy of the value, must agree with it; see
    /// `mappings/README.md`).
    Key {
        attribute: String,
        placeholder: String,
        /// The attribute holding the same value as the placeholder: the placeholder's name
        /// unless the column names another with `copy`.
        copy: String,
    },
}

/// A child table: one row per element of a list-of-maps attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildMapping {
    pub table: String,
    /// The parent attribute holding an `L` of `M`.
    pub source: String,
    /// The column holding the element's 0-based index.
    pub position: String,
    /// Parent columns copied into each child row, first in the child table.
    pub parent_columns: Vec<String>,
    /// The element's fields; every source is [`ColumnSource::Attribute`].
    pub columns: Vec<ColumnMapping>,
}

/// What to do with attributes no column names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnmappedPolicy {
    /// Keep them, as DynamoDB JSON, in the table's `_extra` column.
    #[default]
    Extra,
    Drop,
    /// Send the item to the rejects table.
    Reject,
}

/// What to do with a value that cannot be coerced, or a key that does not match its template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorPolicy {
    /// Send the item to the rejects table.
    #[default]
    Reject,
    /// Keep the row with a null in that column, and count it.
    Null,
}

/// What to do with items whose type value no entity matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnmatchedPolicy {
    /// Write them to inferred tables, as etl does without a mapping.
    #[default]
    Infer,
    Reject,
}

/// A column type as declared in a mapping file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclaredType {
    Int64,
    Decimal {
        precision: u8,
        scale: i8,
    },
    /// Exact canonical decimal text of any size (`decimal` without parameters, or a `decimal`
    /// key placeholder).
    DecimalText,
    Float64,
    Utf8,
    Bool,
    Binary,
    Timestamp {
        unit: TimeUnit,
        format: TimestampFormat,
        /// `UTC` or a fixed offset such as `+02:00`, applied to values that carry no offset.
        tz: String,
    },
    /// `format: None` reads `YYYY-MM-DD`.
    Date {
        format: Option<String>,
    },
    /// Lossless DynamoDB JSON text.
    Json,
    List(Box<DeclaredType>),
    /// From `SS`, `NS` or `BS`.
    Set(Box<DeclaredType>),
    Struct(Vec<(String, DeclaredType)>),
    /// `map<string, T>`: the key type is always `string`.
    Map(Box<DeclaredType>),
}

/// How timestamp values are written in the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimestampFormat {
    EpochS,
    EpochMs,
    EpochUs,
    /// ISO 8601 / RFC 3339 text.
    Iso8601,
    /// A chrono strftime pattern.
    Pattern(String),
}

impl Mapping {
    /// The entity whose `match` lists this type-attribute value.
    pub fn entity_for_type(&self, value: &str) -> Option<&EntityMapping> {
        self.entities.iter().find(|e| e.match_types.iter().any(|m| m == value))
    }
}

impl EntityMapping {
    /// The attributes this entity consumes, so that [`EntityMapping::unmapped`] does not apply
    /// to them: key attributes, attributes named like a key placeholder (duplicates of key
    /// columns), column sources, child-table sources and dropped attributes. The mapping's type
    /// attribute is consumed too but is not listed here.
    pub fn claimed_attributes(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        for k in &self.keys {
            out.insert(k.attribute.as_str());
        }
        for c in &self.columns {
            match &c.source {
                ColumnSource::Attribute(a) => out.insert(a.as_str()),
                ColumnSource::Key { copy, .. } => out.insert(copy.as_str()),
            };
        }
        out.extend(self.children.iter().map(|c| c.source.as_str()));
        out.extend(self.drop.iter().map(String::as_str));
        out
    }
}

impl DeclaredType {
    /// The canonical type text, as it would be written in a mapping file: `decimal(12,2)`,
    /// `list<string>`, `struct<city: string, zip: string>`, `map<string, json>`.
    pub fn label(&self) -> String {
        match self {
            DeclaredType::Int64 => "int64".into(),
            DeclaredType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            DeclaredType::DecimalText => "decimal".into(),
            DeclaredType::Float64 => "float64".into(),
            DeclaredType::Utf8 => "string".into(),
            DeclaredType::Bool => "bool".into(),
            DeclaredType::Binary => "binary".into(),
            DeclaredType::Timestamp { .. } => "timestamp".into(),
            DeclaredType::Date { .. } => "date".into(),
            DeclaredType::Json => "json".into(),
            DeclaredType::List(t) => format!("list<{}>", t.label()),
            DeclaredType::Set(t) => format!("set<{}>", t.label()),
            DeclaredType::Struct(fields) => {
                let fields: Vec<String> =
                    fields.iter().map(|(n, t)| format!("{}: {}", struct_field_label(n), t.label())).collect();
                format!("struct<{}>", fields.join(", "))
            }
            DeclaredType::Map(t) => format!("map<string, {}>", t.label()),
        }
    }

    /// The column type a key placeholder of this type gives.
    pub fn of_placeholder(ty: &PlaceholderType) -> DeclaredType {
        let ts = |unit, format| DeclaredType::Timestamp { unit, format, tz: UTC.into() };
        match ty {
            PlaceholderType::String | PlaceholderType::Uuid | PlaceholderType::Folded(_) => DeclaredType::Utf8,
            PlaceholderType::Int { .. } => DeclaredType::Int64,
            PlaceholderType::Decimal => DeclaredType::DecimalText,
            PlaceholderType::EpochS => ts(TimeUnit::Second, TimestampFormat::EpochS),
            PlaceholderType::EpochMs => ts(TimeUnit::Millisecond, TimestampFormat::EpochMs),
            PlaceholderType::Iso8601 => ts(TimeUnit::Microsecond, TimestampFormat::Iso8601),
            PlaceholderType::Iso8601Ms => ts(TimeUnit::Millisecond, TimestampFormat::Iso8601),
            PlaceholderType::Date => DeclaredType::Date { format: None },
        }
    }
}

pub(super) fn struct_field_label(name: &str) -> String {
    if !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-') {
        name.to_owned()
    } else {
        format!("`{name}`")
    }
}

/// The zone of timestamps that carry none, unless a column says otherwise.
pub(super) const UTC: &str = "UTC";
