//! Column builders: items in, Arrow arrays out.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayBuilder, ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float64Builder,
    Int64Builder, ListArray, MapArray, NullBufferBuilder, PrimitiveBuilder, RecordBatch, StringBuilder, StructArray,
};
use datafusion::arrow::buffer::{OffsetBuffer, ScalarBuffer};
use datafusion::arrow::datatypes::{DataType, FieldRef, Fields, SchemaRef};
use datafusion::arrow::datatypes::{TimestampMicrosecondType, TimestampMillisecondType};
use datafusion::arrow::error::ArrowError;

use crate::decode::{Item, TypeTag, Value};
use crate::schema::{ColumnType, TableSchema, TsUnit};

/// A value did not fit its column, or Arrow refused the arrays.
#[derive(Debug, thiserror::Error)]
pub enum NormalizeError {
    #[error("column `{column}` of table `{table}` expects {expected}, found a `{found}` value")]
    Mismatch { table: String, column: String, expected: String, found: TypeTag },
    #[error("attribute `{attribute}` has no column in table `{table}`")]
    UnknownAttribute { table: String, attribute: String },
    #[error("attribute `{attribute}` appears twice in one row of table `{table}`")]
    RepeatedAttribute { table: String, attribute: String },
    #[error("building arrays for table `{table}`: {source}")]
    Arrow { table: String, source: ArrowError },
}

enum Col {
    Int64(Int64Builder),
    Decimal(Decimal128Builder, u32),
    Utf8(StringBuilder),
    DecimalText(StringBuilder),
    Binary(BinaryBuilder),
    Bool(BooleanBuilder),
    Json(StringBuilder, String),
    Null(StringBuilder),
    List {
        field: FieldRef,
        offsets: Vec<i32>,
        nulls: NullBufferBuilder,
        child: Box<Col>,
    },
    Struct {
        fields: Fields,
        names: Vec<String>,
        children: Vec<Col>,
        nulls: NullBufferBuilder,
    },
    Float64(Float64Builder),
    /// Declared in seconds, written in milliseconds (see [`TsUnit::stored`]).
    TsSecond(PrimitiveBuilder<TimestampMillisecondType>),
    TsMilli(PrimitiveBuilder<TimestampMillisecondType>),
    TsMicro(PrimitiveBuilder<TimestampMicrosecondType>),
    Date(Date32Builder),
    Map {
        field: FieldRef,
        entries: Fields,
        offsets: Vec<i32>,
        nulls: NullBufferBuilder,
        keys: StringBuilder,
        values: Box<Col>,
    },
}

/// Where a mismatch happened: `expected` describes the column type.
struct Mismatch {
    expected: String,
    found: TypeTag,
}

impl Mismatch {
    /// The error for this mismatch in column `column` of table `table`.
    fn in_column(self, table: &str, column: &str) -> NormalizeError {
        NormalizeError::Mismatch {
            table: table.to_owned(),
            column: column.to_owned(),
            expected: self.expected,
            found: self.found,
        }
    }
}

impl Col {
    fn new(ty: &ColumnType, arrow: &DataType) -> Col {
        match (ty, arrow) {
            (ColumnType::Int64, _) => Col::Int64(Int64Builder::new()),
            (ColumnType::Decimal { .. }, dt) => {
                let scale = match dt {
                    DataType::Decimal128(_, s) => (*s).max(0) as u32,
                    _ => 0,
                };
                Col::Decimal(Decimal128Builder::new().with_data_type(dt.clone()), scale)
            }
            (ColumnType::Utf8, _) => Col::Utf8(StringBuilder::new()),
            (ColumnType::DecimalText, _) => Col::DecimalText(StringBuilder::new()),
            (ColumnType::Binary, _) => Col::Binary(BinaryBuilder::new()),
            (ColumnType::Bool, _) => Col::Bool(BooleanBuilder::new()),
            (ColumnType::Json, _) => Col::Json(StringBuilder::new(), String::new()),
            (ColumnType::Null, _) => Col::Null(StringBuilder::new()),
            (ColumnType::List { element, .. }, DataType::List(field)) => Col::List {
                field: field.clone(),
                offsets: vec![0],
                nulls: NullBufferBuilder::new(0),
                child: Box::new(Col::new(element, field.data_type())),
            },
            (ColumnType::Struct { fields }, DataType::Struct(arrow_fields)) => Col::Struct {
                fields: arrow_fields.clone(),
                names: fields.iter().map(|f| f.name.clone()).collect(),
                children: fields
                    .iter()
                    .zip(arrow_fields.iter())
                    .map(|(f, af)| Col::new(&f.ty, af.data_type()))
                    .collect(),
                nulls: NullBufferBuilder::new(0),
            },
            (ColumnType::Float64, _) => Col::Float64(Float64Builder::new()),
            (ColumnType::Timestamp { unit }, dt) => match unit {
                TsUnit::Second => Col::TsSecond(PrimitiveBuilder::new().with_data_type(dt.clone())),
                TsUnit::Millisecond => Col::TsMilli(PrimitiveBuilder::new().with_data_type(dt.clone())),
                TsUnit::Microsecond => Col::TsMicro(PrimitiveBuilder::new().with_data_type(dt.clone())),
            },
            (ColumnType::Date, _) => Col::Date(Date32Builder::new()),
            (ColumnType::Map { value }, DataType::Map(field, _)) => {
                let entries = match field.data_type() {
                    DataType::Struct(f) => f.clone(),
                    _ => Fields::empty(),
                };
                let value_type = entries.get(1).map(|f| f.data_type().clone()).unwrap_or(DataType::Null);
                Col::Map {
                    field: field.clone(),
                    entries,
                    offsets: vec![0],
                    nulls: NullBufferBuilder::new(0),
                    keys: StringBuilder::new(),
                    values: Box::new(Col::new(value, &value_type)),
                }
            }
            // The arrow type is derived from the column type, so the pairs above are complete.
            (_, _) => Col::Null(StringBuilder::new()),
        }
    }

    fn expected(&self) -> &'static str {
        match self {
            Col::Int64(_) => "an integral number within int64",
            Col::Decimal(..) => "a number that fits the decimal column",
            Col::Utf8(_) => "a string (`S`)",
            Col::DecimalText(_) => "a number (`N`)",
            Col::Binary(_) => "binary (`B`)",
            Col::Bool(_) => "a boolean (`BOOL`)",
            Col::Json(..) => "any value",
            Col::Null(_) => "only `NULL`",
            Col::List { .. } => "a list or set",
            Col::Struct { .. } => "a map (`M`)",
            Col::Float64(_) => "a number (`N`)",
            Col::TsSecond(_) | Col::TsMilli(_) | Col::TsMicro(_) => "an epoch number in the column's unit",
            Col::Date(_) => "a number of days since 1970-01-01",
            Col::Map { .. } => "a map (`M`)",
        }
    }

    fn append(&mut self, v: Option<&Value<'_>>) -> Result<(), Mismatch> {
        let v = match (v, &*self) {
            (Some(Value::Null), Col::Json(..)) => Some(&Value::Null),
            (Some(Value::Null), _) | (None, _) => None,
            (Some(v), _) => Some(v),
        };
        let mismatch = |c: &Col, v: &Value<'_>| Mismatch { expected: c.expected().to_owned(), found: v.tag() };
        match self {
            Col::Int64(b) => match v {
                None => b.append_null(),
                Some(Value::N(n)) => match n.to_i64() {
                    Some(i) => b.append_value(i),
                    None => {
                        return Err(Mismatch { expected: "an integral number within int64".into(), found: TypeTag::N });
                    }
                },
                Some(v) => return Err(mismatch(self, v)),
            },
            Col::Decimal(b, scale) => match v {
                None => b.append_null(),
                Some(Value::N(n)) => match n.to_i128_scaled(*scale) {
                    Some(i) => b.append_value(i),
                    None => {
                        return Err(Mismatch {
                            expected: format!("a number with at most {scale} decimals"),
                            found: TypeTag::N,
                        });
                    }
                },
                Some(v) => return Err(mismatch(self, v)),
            },
            Col::Utf8(b) => match v {
                None => b.append_null(),
                Some(Value::S(s)) => b.append_value(s),
                Some(v) => return Err(mismatch(self, v)),
            },
            Col::DecimalText(b) => match v {
                None => b.append_null(),
                Some(Value::N(n)) => b.append_value(n.as_str()),
                Some(v) => return Err(mismatch(self, v)),
            },
            Col::Binary(b) => match v {
                None => b.append_null(),
                Some(Value::B(x)) => b.append_value(x),
                Some(v) => return Err(mismatch(self, v)),
            },
            Col::Bool(b) => match v {
                None => b.append_null(),
                Some(Value::Bool(x)) => b.append_value(*x),
                Some(v) => return Err(mismatch(self, v)),
            },
            Col::Json(b, scratch) => match v {
                None => b.append_null(),
                Some(v) => {
                    scratch.clear();
                    v.write_dynamodb_json(scratch);
                    b.append_value(scratch.as_str());
                }
            },
            Col::Null(b) => match v {
                None => b.append_null(),
                Some(v) => return Err(mismatch(self, v)),
            },
            Col::List { offsets, nulls, child, .. } => {
                match v {
                    None => nulls.append_null(),
                    Some(Value::L(items)) => {
                        for e in items {
                            child.append(Some(e))?;
                        }
                        nulls.append_non_null();
                    }
                    Some(Value::SS(items)) => {
                        for s in items {
                            child.append(Some(&Value::S(Cow::Borrowed(s.as_ref()))))?;
                        }
                        nulls.append_non_null();
                    }
                    Some(Value::NS(items)) => {
                        for n in items {
                            child.append(Some(&Value::N(n.clone())))?;
                        }
                        nulls.append_non_null();
                    }
                    Some(Value::BS(items)) => {
                        for x in items {
                            child.append(Some(&Value::B(Cow::Borrowed(x.as_ref()))))?;
                        }
                        nulls.append_non_null();
                    }
                    Some(v) => return Err(Mismatch { expected: "a list or set".into(), found: v.tag() }),
                }
                let len = child.len() as i32;
                offsets.push(len);
            }
            Col::Struct { names, children, nulls, .. } => match v {
                None => {
                    for c in children.iter_mut() {
                        c.append(None)?;
                    }
                    nulls.append_null();
                }
                Some(Value::M(fields)) => {
                    for (i, (name, c)) in names.iter().zip(children.iter_mut()).enumerate() {
                        // Maps of one attribute usually list their fields in the struct's order,
                        // so the field at the same place is tried first (names in a map are
                        // unique: the decoder refuses a repeated one).
                        let found = match fields.get(i) {
                            Some((k, v)) if k == name => Some(v),
                            _ => fields.iter().find(|(k, _)| k == name).map(|(_, v)| v),
                        };
                        c.append(found)?;
                    }
                    nulls.append_non_null();
                }
                Some(v) => return Err(Mismatch { expected: "a map (`M`)".into(), found: v.tag() }),
            },
            Col::Float64(b) => match v {
                None => b.append_null(),
                Some(Value::N(n)) => match n.as_str().parse::<f64>() {
                    Ok(f) if f.is_finite() => b.append_value(f),
                    _ => return Err(Mismatch { expected: "a number within float64".into(), found: TypeTag::N }),
                },
                Some(v) => return Err(mismatch(self, v)),
            },
            Col::TsSecond(b) => append_i64(b, v, TsUnit::Second.stored_per_unit(), self_expected_ts())?,
            Col::TsMilli(b) => append_i64(b, v, 1, self_expected_ts())?,
            Col::TsMicro(b) => append_i64(b, v, 1, self_expected_ts())?,
            Col::Date(b) => match v {
                None => b.append_null(),
                Some(Value::N(n)) => match n.to_i64().and_then(|d| i32::try_from(d).ok()) {
                    Some(d) => b.append_value(d),
                    None => return Err(Mismatch { expected: "a day number within date32".into(), found: TypeTag::N }),
                },
                Some(v) => return Err(mismatch(self, v)),
            },
            Col::Map { offsets, nulls, keys, values, .. } => {
                match v {
                    None => nulls.append_null(),
                    Some(Value::M(fields)) => {
                        for (k, x) in fields {
                            keys.append_value(k);
                            values.append(Some(x))?;
                        }
                        nulls.append_non_null();
                    }
                    Some(v) => return Err(Mismatch { expected: "a map (`M`)".into(), found: v.tag() }),
                }
                offsets.push(keys.len() as i32);
            }
        }
        Ok(())
    }

    fn len(&self) -> usize {
        match self {
            Col::Int64(b) => b.len(),
            Col::Decimal(b, _) => b.len(),
            Col::Utf8(b) | Col::DecimalText(b) | Col::Json(b, _) | Col::Null(b) => b.len(),
            Col::Binary(b) => b.len(),
            Col::Bool(b) => b.len(),
            Col::List { nulls, .. } | Col::Struct { nulls, .. } | Col::Map { nulls, .. } => nulls.len(),
            Col::Float64(b) => b.len(),
            Col::TsSecond(b) => b.len(),
            Col::TsMilli(b) => b.len(),
            Col::TsMicro(b) => b.len(),
            Col::Date(b) => b.len(),
        }
    }

    fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        Ok(match self {
            Col::Int64(b) => Arc::new(b.finish()),
            Col::Decimal(b, _) => Arc::new(b.finish()),
            Col::Utf8(b) | Col::DecimalText(b) | Col::Json(b, _) | Col::Null(b) => Arc::new(b.finish()),
            Col::Binary(b) => Arc::new(b.finish()),
            Col::Bool(b) => Arc::new(b.finish()),
            Col::List { field, offsets, nulls, child } => {
                let values = child.finish()?;
                let offs = std::mem::replace(offsets, vec![0]);
                Arc::new(ListArray::try_new(
                    field.clone(),
                    OffsetBuffer::new(ScalarBuffer::from(offs)),
                    values,
                    nulls.finish(),
                )?)
            }
            Col::Float64(b) => Arc::new(b.finish()),
            Col::TsSecond(b) => Arc::new(b.finish()),
            Col::TsMilli(b) => Arc::new(b.finish()),
            Col::TsMicro(b) => Arc::new(b.finish()),
            Col::Date(b) => Arc::new(b.finish()),
            Col::Map { field, entries, offsets, nulls, keys, values } => {
                let k: ArrayRef = Arc::new(keys.finish());
                let v = values.finish()?;
                let offs = std::mem::replace(offsets, vec![0]);
                let entries = StructArray::try_new(entries.clone(), vec![k, v], None)?;
                Arc::new(MapArray::try_new(
                    field.clone(),
                    OffsetBuffer::new(ScalarBuffer::from(offs)),
                    entries,
                    nulls.finish(),
                    false,
                )?)
            }
            Col::Struct { fields, children, nulls, .. } => {
                let len = nulls.len();
                let arrays = children.iter_mut().map(Col::finish).collect::<Result<Vec<_>, _>>()?;
                let n = nulls.finish();
                if arrays.is_empty() {
                    Arc::new(StructArray::new_empty_fields(len, n))
                } else {
                    Arc::new(StructArray::try_new(fields.clone(), arrays, n)?)
                }
            }
        })
    }
}

fn self_expected_ts() -> &'static str {
    "an epoch number in the column's unit"
}

/// Appends an `N` holding an integer, times `scale` (the stored units per value unit).
fn append_i64<T>(b: &mut PrimitiveBuilder<T>, v: Option<&Value<'_>>, scale: i64, expected: &str) -> Result<(), Mismatch>
where
    T: datafusion::arrow::datatypes::ArrowPrimitiveType<Native = i64>,
{
    match v {
        None => b.append_null(),
        Some(Value::N(n)) => match n.to_i64().and_then(|i| i.checked_mul(scale)) {
            Some(i) => b.append_value(i),
            None => return Err(Mismatch { expected: expected.to_owned(), found: TypeTag::N }),
        },
        Some(v) => return Err(Mismatch { expected: expected.to_owned(), found: v.tag() }),
    }
    Ok(())
}

/// Where one attribute of a row goes in a table ([`BatchBuilder::slot_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The column at this index.
    Column(usize),
    /// The extra column, which takes attributes without one of their own.
    Extra,
    /// Nowhere: the table has no such column and no extra column.
    Unknown,
}

/// Builds record batches of one table from items.
pub struct BatchBuilder {
    table: String,
    schema: SchemaRef,
    names: Vec<String>,
    index: HashMap<String, usize>,
    cols: Vec<Col>,
    rows: usize,
    /// The column that takes attributes without one of their own, as a DynamoDB JSON item.
    extra: Option<usize>,
    extra_text: String,
    /// [`BatchBuilder::put`]: the columns the row being appended has a value for.
    filled: Vec<bool>,
}

impl BatchBuilder {
    pub fn new(table: &TableSchema) -> Self {
        let schema = Arc::new(table.arrow_schema());
        let cols = table.columns.iter().zip(schema.fields()).map(|(c, f)| Col::new(&c.ty, f.data_type())).collect();
        let names: Vec<String> = table.columns.iter().map(|c| c.source.clone()).collect();
        let extra = table.extra.as_ref().and_then(|e| table.columns.iter().position(|c| &c.name == e));
        let index = names.iter().enumerate().filter(|(i, _)| Some(*i) != extra).map(|(i, n)| (n.clone(), i)).collect();
        BatchBuilder {
            table: table.table.clone(),
            schema,
            names,
            index,
            cols,
            rows: 0,
            extra,
            extra_text: String::new(),
            filled: Vec::new(),
        }
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Where an attribute named `name` goes in this table.
    pub fn slot_of(&self, name: &str) -> Slot {
        match self.index.get(name) {
            Some(&i) => Slot::Column(i),
            None if self.extra.is_some() => Slot::Extra,
            None => Slot::Unknown,
        }
    }

    /// [`BatchBuilder::slot_of`] for the attribute at position `pos` of its row: rows of one
    /// table usually list attributes in column order, so that column is tried first.
    #[inline]
    pub fn slot_at(&self, pos: usize, name: &str) -> Slot {
        match self.names.get(pos) {
            Some(n) if n == name && Some(pos) != self.extra => Slot::Column(pos),
            _ => self.slot_of(name),
        }
    }

    /// Appends one item as a row: [`BatchBuilder::put`] for each attribute, between
    /// [`BatchBuilder::begin_row`] and [`BatchBuilder::end_row`].
    pub fn append(&mut self, item: &Item<'_>) -> Result<(), NormalizeError> {
        self.begin_row();
        for (pos, (name, v)) in item.iter().enumerate() {
            self.put(self.slot_at(pos, name), name, v)?;
        }
        self.end_row()
    }

    /// Starts a row appended attribute by attribute ([`BatchBuilder::put`], then
    /// [`BatchBuilder::end_row`]): pass two reads values from the spill straight into their
    /// columns, never building a row of values first.
    pub fn begin_row(&mut self) {
        self.filled.clear();
        self.filled.resize(self.cols.len(), false);
        self.extra_text.clear();
    }

    /// Appends one attribute of the row begun, to where `slot` says ([`BatchBuilder::slot_of`]).
    #[inline]
    pub fn put(&mut self, slot: Slot, name: &str, v: &Value<'_>) -> Result<(), NormalizeError> {
        match slot {
            Slot::Column(i) => {
                if std::mem::replace(&mut self.filled[i], true) {
                    return Err(NormalizeError::RepeatedAttribute {
                        table: self.table.clone(),
                        attribute: name.to_owned(),
                    });
                }
                self.cols[i].append(Some(v)).map_err(|m| m.in_column(&self.table, &self.names[i]))
            }
            Slot::Extra => {
                // The extra column's item, written as its attributes come (as
                // `write_item_json` writes the item of them).
                self.extra_text.push(if self.extra_text.is_empty() { '{' } else { ',' });
                crate::decode::json::write_json_string(&mut self.extra_text, name);
                self.extra_text.push(':');
                v.write_dynamodb_json(&mut self.extra_text);
                Ok(())
            }
            Slot::Unknown => {
                Err(NormalizeError::UnknownAttribute { table: self.table.clone(), attribute: name.to_owned() })
            }
        }
    }

    /// Ends the row begun: columns it had no value for are null.
    pub fn end_row(&mut self) -> Result<(), NormalizeError> {
        if !self.extra_text.is_empty() {
            self.extra_text.push('}');
        }
        let extra = Value::S(Cow::Borrowed(self.extra_text.as_str()));
        for (i, col) in self.cols.iter_mut().enumerate() {
            if self.filled[i] {
                continue;
            }
            let v = (Some(i) == self.extra && !self.extra_text.is_empty()).then_some(&extra);
            col.append(v).map_err(|m| m.in_column(&self.table, &self.names[i]))?;
        }
        self.rows += 1;
        Ok(())
    }

    pub fn finish(&mut self) -> Result<RecordBatch, NormalizeError> {
        let arrow = |source| NormalizeError::Arrow { table: self.table.clone(), source };
        let arrays = self.cols.iter_mut().map(Col::finish).collect::<Result<Vec<_>, _>>().map_err(arrow)?;
        let rows = std::mem::take(&mut self.rows);
        let opts = datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(self.schema.clone(), arrays, &opts).map_err(arrow)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::TimeUnit;

    use super::*;
    use crate::decode::Number;
    use crate::schema::{Column, StructField};

    fn column(name: &str, ty: ColumnType) -> Column {
        Column { name: name.into(), source: name.into(), ty, nullable: true, seen: BTreeMap::new() }
    }

    fn n(text: &str) -> Value<'_> {
        Value::N(Number::parse(text).unwrap())
    }

    /// Regression: seconds were written as Arrow `Timestamp(Second)`, which Parquet stores as a
    /// bare INT64 that pyarrow and DuckDB read as a plain integer.
    #[test]
    fn seconds_are_written_as_utc_milliseconds_also_when_nested() {
        let secs = ColumnType::Timestamp { unit: TsUnit::Second };
        let table = TableSchema {
            table: "t".into(),
            entity: None,
            columns: vec![
                column("at", secs.clone()),
                column("ats", ColumnType::List { element: Box::new(secs.clone()), set: None }),
                column(
                    "s",
                    ColumnType::Struct {
                        fields: vec![StructField { name: "at".into(), ty: secs.clone(), seen: BTreeMap::new() }],
                    },
                ),
            ],
            extra: None,
        };
        let mut b = BatchBuilder::new(&table);
        let item: Item<'_> = vec![
            ("at".into(), n("1752663090")),
            ("ats".into(), Value::L(vec![n("-1"), n("0")])),
            ("s".into(), Value::M(vec![("at".into(), n("86400"))])),
        ];
        b.append(&item).unwrap();
        let batch = b.finish().unwrap();
        let ms = DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
        assert_eq!(batch.schema().field(0).data_type(), &ms);
        let at = batch.column(0).as_primitive::<TimestampMillisecondType>();
        assert_eq!(at.value(0), 1_752_663_090_000);
        let ats = batch.column(1).as_list::<i32>();
        assert_eq!(ats.value_type(), ms);
        let ats = ats.value(0);
        assert_eq!(ats.as_primitive::<TimestampMillisecondType>().values().to_vec(), [-1000, 0]);
        let s = batch.column(2).as_struct();
        assert_eq!(s.column(0).data_type(), &ms);
        assert_eq!(s.column(0).as_primitive::<TimestampMillisecondType>().value(0), 86_400_000);
        // The declared unit is kept in the field metadata.
        let meta = batch.schema().field(0).metadata().get(crate::schema::META_DYNAMODB_TYPE).cloned();
        assert_eq!(meta.as_deref(), Some("unit=s"));

        // Seconds beyond what milliseconds can hold do not wrap.
        let too_big = (i64::MAX / 1000 + 1).to_string();
        let item: Item<'_> = vec![("at".into(), n(&too_big))];
        assert!(matches!(b.append(&item), Err(NormalizeError::Mismatch { .. })));
    }

    /// A struct's fields are found by name whatever the map's order, missing ones null: the
    /// field at the struct's own place is only tried first.
    #[test]
    fn struct_fields_are_found_by_name_in_any_order() {
        let field = |name: &str, ty| StructField { name: name.into(), ty, seen: BTreeMap::new() };
        let fields = vec![field("a", ColumnType::Int64), field("b", ColumnType::Utf8), field("c", ColumnType::Int64)];
        let table = TableSchema {
            table: "t".into(),
            entity: None,
            columns: vec![column("s", ColumnType::Struct { fields })],
            extra: None,
        };
        let map = |pairs: Vec<(&'static str, Value<'static>)>| -> Item<'static> {
            vec![("s".into(), Value::M(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect()))]
        };
        let items = [
            map(vec![("a", n("1")), ("b", Value::S("x".into())), ("c", n("3"))]),
            map(vec![("c", n("6")), ("a", n("4")), ("b", Value::S("y".into()))]),
            map(vec![("b", Value::S("z".into()))]),
            map(vec![("a", n("7")), ("c", n("9"))]),
        ];
        let mut b = BatchBuilder::new(&table);
        for item in &items {
            b.append(item).unwrap();
        }
        let batch = b.finish().unwrap();
        let s = batch.column(0).as_struct();
        let ints = |i: usize| -> Vec<Option<i64>> {
            s.column(i).as_primitive::<datafusion::arrow::datatypes::Int64Type>().iter().collect()
        };
        assert_eq!(ints(0), [Some(1), Some(4), None, Some(7)]);
        assert_eq!(ints(2), [Some(3), Some(6), None, Some(9)]);
        let text: Vec<Option<&str>> = s.column(1).as_string::<i32>().iter().collect();
        assert_eq!(text, [Some("x"), Some("y"), Some("z"), None]);
    }

    /// Rows appended attribute by attribute (pass two's way) are the rows `append` builds,
    /// the extra column's item included; an attribute twice in a row, or without a place, is
    /// refused.
    #[test]
    fn rows_put_attribute_by_attribute_equal_appended_items() {
        let table = TableSchema {
            table: "t".into(),
            entity: None,
            columns: vec![
                column("pk", ColumnType::Utf8),
                column("n", ColumnType::Int64),
                column("ok", ColumnType::Bool),
                column("_extra", ColumnType::Utf8),
            ],
            extra: Some("_extra".into()),
        };
        let items: Vec<Item<'_>> = vec![
            vec![("pk".into(), Value::S("a".into())), ("rare".into(), n("7")), ("n".into(), n("1"))],
            vec![("ok".into(), Value::Bool(true)), ("pk".into(), Value::S("b".into())), ("z".into(), Value::Null)],
            vec![("n".into(), Value::Null)],
        ];
        let (mut appended, mut put) = (BatchBuilder::new(&table), BatchBuilder::new(&table));
        for item in &items {
            appended.append(item).unwrap();
            put.begin_row();
            for (k, v) in item {
                put.put(put.slot_of(k), k, v).unwrap();
            }
            put.end_row().unwrap();
        }
        let (a, p) = (appended.finish().unwrap(), put.finish().unwrap());
        assert_eq!(a, p);
        let extra = p.column(3).as_string::<i32>();
        assert_eq!(extra.value(0), r#"{"rare":{"N":"7"}}"#);
        assert_eq!(extra.value(1), r#"{"z":{"NULL":true}}"#);
        assert!(extra.is_null(2));

        let mut b = BatchBuilder::new(&table);
        b.begin_row();
        b.put(b.slot_of("pk"), "pk", &Value::S("a".into())).unwrap();
        let twice = b.put(b.slot_of("pk"), "pk", &Value::S("b".into()));
        assert!(matches!(twice, Err(NormalizeError::RepeatedAttribute { .. })), "{twice:?}");
        let strict = TableSchema { extra: None, columns: table.columns[..3].to_vec(), ..table.clone() };
        let b = BatchBuilder::new(&strict);
        assert_eq!(b.slot_of("rare"), Slot::Unknown);
        assert_eq!(b.slot_of("n"), Slot::Column(1));
    }
}
