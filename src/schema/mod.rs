//! The table contract shared by `normalize`, `sink` and `sql`: [`TableSchema`], its
//! [`ColumnType`]s, the Arrow field-metadata keys etl writes, the record of every
//! [`Widening`] inference chose, and the [`diff::Drift`] between two outputs' contracts.
//!
//! A [`TableSchema`] is the typed contract between routing/normalizing and the sink: column names,
//! column types and where each column came from in DynamoDB. This module does no I/O and knows
//! nothing of how a schema was found (inferred from the data or declared in a mapping file).

pub mod diff;

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema};
use serde::{Deserialize, Serialize};

use crate::decode::TypeTag;

/// The one field metadata key: the DynamoDB type(s) a column's values had (`S`, `N`, `SS`,
/// `S|N`, ...).
pub const META_DYNAMODB_TYPE: &str = "dynamodb.type";
/// Inside [`META_DYNAMODB_TYPE`]: how a text column encodes its values, as in
/// `S|N; encoding=dynamodb-json` or `N; encoding=decimal-text`.
pub const ENCODING_PREFIX: &str = "encoding=";
/// Inside [`META_DYNAMODB_TYPE`]: the unit a timestamp column was declared in (`s`, `ms`, `us`),
/// as in `N; attribute=signup_at; unit=s`. Parquet has no seconds unit, so a column declared in
/// seconds is written in milliseconds and this is the only place its declared unit survives.
pub const UNIT_PREFIX: &str = "unit=";

/// Precision of every inferred decimal column: the most DynamoDB numbers can have.
pub const DECIMAL_PRECISION: u8 = 38;

/// A column's type in the output tables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ColumnType {
    Int64,
    Decimal {
        precision: u8,
        scale: i8,
    },
    /// Numbers that fit no Decimal128 kept as exact canonical decimal text.
    DecimalText,
    Utf8,
    Binary,
    Bool,
    /// Values of mixed or unstable shape, as compact DynamoDB JSON text (lossless).
    Json,
    /// Only `NULL` values were seen.
    Null,
    List {
        element: Box<ColumnType>,
        set: Option<SetKind>,
    },
    Struct {
        fields: Vec<StructField>,
    },
    /// Only from a mapping file (`float64`): numbers as doubles, which can round.
    Float64,
    /// Only from a mapping file: instants in UTC; values are epoch integers in `unit`, written
    /// in [`TsUnit::stored`] (Parquet has no seconds unit).
    Timestamp {
        unit: TsUnit,
    },
    /// Only from a mapping file: days since 1970-01-01.
    Date,
    /// Only from a mapping file (`map<string, T>`): an `M` with free keys.
    Map {
        value: Box<ColumnType>,
    },
}

/// The unit of a timestamp column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TsUnit {
    Second,
    Millisecond,
    Microsecond,
}

impl TsUnit {
    /// The unit the column is written in: Parquet's timestamp logical type knows milliseconds,
    /// microseconds and nanoseconds only, and Arrow's seconds are written as a bare INT64 that
    /// every reader but arrow-rs takes for a plain integer. Seconds are therefore stored as
    /// milliseconds (exactly: every value is a multiple of 1000).
    pub fn stored(self) -> TsUnit {
        match self {
            TsUnit::Second | TsUnit::Millisecond => TsUnit::Millisecond,
            TsUnit::Microsecond => TsUnit::Microsecond,
        }
    }

    /// How many stored units make one declared unit.
    pub fn stored_per_unit(self) -> i64 {
        match self {
            TsUnit::Second => 1_000,
            TsUnit::Millisecond | TsUnit::Microsecond => 1,
        }
    }

    /// The Arrow unit of the written column ([`TsUnit::stored`]).
    pub fn arrow(self) -> datafusion::arrow::datatypes::TimeUnit {
        use datafusion::arrow::datatypes::TimeUnit as A;
        match self.stored() {
            TsUnit::Second => A::Second,
            TsUnit::Millisecond => A::Millisecond,
            TsUnit::Microsecond => A::Microsecond,
        }
    }

    /// The declared unit as the field metadata records it: `s`, `ms`, `us`.
    pub fn short(self) -> &'static str {
        match self {
            TsUnit::Second => "s",
            TsUnit::Millisecond => "ms",
            TsUnit::Microsecond => "us",
        }
    }
}

/// Which DynamoDB set a list column came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetKind {
    SS,
    NS,
    BS,
}

impl SetKind {
    pub fn tag(self) -> TypeTag {
        match self {
            SetKind::SS => TypeTag::SS,
            SetKind::NS => TypeTag::NS,
            SetKind::BS => TypeTag::BS,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StructField {
    pub name: String,
    #[serde(flatten)]
    pub ty: ColumnType,
    /// DynamoDB types seen for this field, with counts.
    pub seen: BTreeMap<String, u64>,
}

/// One output column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    pub name: String,
    /// The attribute it reads.
    pub source: String,
    #[serde(flatten)]
    pub ty: ColumnType,
    pub nullable: bool,
    /// DynamoDB types seen for this attribute, with counts.
    pub seen: BTreeMap<String, u64>,
}

/// A column whose type is wider than some of its values needed, as inference chose it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Widening {
    pub table: String,
    pub column: String,
    pub seen: BTreeMap<String, u64>,
    pub chosen: String,
    pub reason: String,
}

/// Attributes inference kept out of a table's columns, into its extra column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Demoted {
    pub table: String,
    /// The column that holds them, as a DynamoDB JSON item per row.
    pub column: String,
    /// How many distinct attributes went there.
    pub attributes: u64,
    /// A few of them, most frequent first.
    pub examples: Vec<String>,
    pub reason: String,
}

/// A column whose name differs from its attribute's, to keep names unique without regard to
/// case (readers such as DuckDB, Spark and Athena fold case).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renamed {
    pub table: String,
    pub attribute: String,
    pub column: String,
    pub reason: String,
}

/// The schema of one output table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    pub table: String,
    /// The type-attribute value that routes items here (`None` for `_untyped`).
    pub entity: Option<String>,
    pub columns: Vec<Column>,
    /// The column that takes every attribute without a column of its own, as one DynamoDB
    /// JSON item (inferred tables whose rare attributes were kept out of the columns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<String>,
}

impl ColumnType {
    pub fn arrow(&self) -> DataType {
        match self {
            ColumnType::Int64 => DataType::Int64,
            ColumnType::Decimal { precision, scale } => DataType::Decimal128(*precision, *scale),
            ColumnType::DecimalText | ColumnType::Utf8 | ColumnType::Json | ColumnType::Null => DataType::Utf8,
            ColumnType::Binary => DataType::Binary,
            ColumnType::Bool => DataType::Boolean,
            ColumnType::List { element, set } => {
                DataType::List(Arc::new(element.field("item", set.map(|s| s.tag().key().to_owned()))))
            }
            ColumnType::Struct { fields } => DataType::Struct(Fields::from(
                fields.iter().map(|f| f.ty.field(&f.name, Some(seen_label(&f.seen)))).collect::<Vec<_>>(),
            )),
            ColumnType::Float64 => DataType::Float64,
            ColumnType::Timestamp { unit } => DataType::Timestamp(unit.arrow(), Some("UTC".into())),
            ColumnType::Date => DataType::Date32,
            ColumnType::Map { value } => DataType::Map(
                Arc::new(Field::new(
                    "entries",
                    DataType::Struct(Fields::from(vec![
                        Field::new("key", DataType::Utf8, false),
                        value.field("value", None),
                    ])),
                    false,
                )),
                false,
            ),
        }
    }

    /// An Arrow field of this type with etl's metadata.
    ///
    /// Exactly one metadata key per field: Arrow serialises field metadata from a hash map, so
    /// two keys could be written in either order and Parquet output would not be byte-identical.
    pub fn field(&self, name: &str, dynamodb_type: Option<String>) -> Field {
        let mut value = dynamodb_type.unwrap_or_default();
        let encoding = match self {
            ColumnType::Json => Some("dynamodb-json"),
            ColumnType::DecimalText => Some("decimal-text"),
            _ => None,
        };
        if let Some(enc) = encoding {
            value.push_str(&format!("; {ENCODING_PREFIX}{enc}"));
        }
        if let ColumnType::Timestamp { unit } = self {
            if !value.is_empty() {
                value.push_str("; ");
            }
            value.push_str(&format!("{UNIT_PREFIX}{}", unit.short()));
        }
        let meta: std::collections::HashMap<String, String> =
            if value.is_empty() { Default::default() } else { [(META_DYNAMODB_TYPE.to_owned(), value)].into() };
        Field::new(name, self.arrow(), true).with_metadata(meta)
    }

    /// A short name for reports: `int64`, `decimal(38,2)`, `list<string>`, ...
    pub fn label(&self) -> String {
        match self {
            ColumnType::Int64 => "int64".into(),
            ColumnType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            ColumnType::DecimalText => "decimal-text".into(),
            ColumnType::Utf8 => "string".into(),
            ColumnType::Binary => "binary".into(),
            ColumnType::Bool => "bool".into(),
            ColumnType::Json => "json".into(),
            ColumnType::Null => "null".into(),
            ColumnType::List { element, set: Some(s) } => format!("set<{}> ({s:?})", element.label()),
            ColumnType::List { element, set: None } => format!("list<{}>", element.label()),
            ColumnType::Struct { fields } => format!("struct<{} fields>", fields.len()),
            ColumnType::Float64 => "float64".into(),
            ColumnType::Timestamp { unit } => format!("timestamp({unit:?}, UTC)").to_lowercase(),
            ColumnType::Date => "date".into(),
            ColumnType::Map { value } => format!("map<string, {}>", value.label()),
        }
    }
}

/// `S`, `N`, or `N|S` when several types were seen (NULL left out unless alone).
pub fn seen_label(seen: &BTreeMap<String, u64>) -> String {
    let non_null: Vec<&str> = seen.keys().filter(|k| *k != "NULL").map(String::as_str).collect();
    if non_null.is_empty() { seen.keys().cloned().collect::<Vec<_>>().join("|") } else { non_null.join("|") }
}

impl TableSchema {
    pub fn arrow_schema(&self) -> Schema {
        let mut meta = std::collections::HashMap::new();
        if let Some(e) = &self.entity {
            meta.insert("etl.entity".to_owned(), e.clone());
        }
        Schema::new_with_metadata(
            self.columns.iter().map(|c| c.ty.field(&c.name, Some(seen_label(&c.seen)))).collect::<Vec<_>>(),
            meta,
        )
    }
}
