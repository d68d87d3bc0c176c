//! Schema drift: what changed between two outputs' table contracts (`_etl/schema/<table>.json`),
//! as a typed [`Drift`], and the [`OnDrift`] policy a run applies to it.
//!
//! [`diff`] compares two sets of [`TableSchema`]s table by table and column by column: tables
//! added and gone, columns added and gone, type changes classified against the widenings
//! inference makes ([`Widening`](super::Widening)s: `null` → anything, `int64` → `decimal` →
//! decimal text, a larger decimal scale, any type → DynamoDB JSON text, lists and maps whose
//! elements widen, structs that gain fields), the `dynamodb.type` field metadata, the attribute a
//! column reads, nullability, and a table's entity and extra column. The order is deterministic:
//! tables by name; inside a table, table-level changes, then columns in the new schema's order,
//! then gone columns in the old schema's order. Counts of types seen (which change with every
//! run) and column order are not drift. This module compares values; it never reads them from
//! anywhere.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Column, ColumnType, META_DYNAMODB_TYPE, StructField, TableSchema, seen_label};

/// What a run does when its tables' contracts differ from the output it replaces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDrift {
    /// Publish, and list the drift in the report (the default).
    #[default]
    Allow,
    /// Refuse any change: nothing is published and the previous output stays as it was.
    Fail,
}

/// Every difference between two sets of table contracts, table by table (tables without a
/// difference are left out).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drift {
    pub tables: Vec<TableDrift>,
}

/// The differences of one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDrift {
    pub table: String,
    pub changes: Vec<Change>,
}

/// How a column's type changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TypeChange {
    /// The new type holds every value of the old one exactly (a widening inference makes).
    Widened,
    /// The old type holds every value of the new one: the new data no longer needed the width.
    Narrowed,
    /// Neither holds the other's values (a mapping declared another type, say).
    Retyped,
}

/// One difference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    /// A table the old output did not have.
    TableAdded {
        columns: usize,
    },
    /// A table the new output does not have.
    TableGone {
        columns: usize,
    },
    /// The type-attribute value routing items to the table.
    EntityChanged {
        from: Option<String>,
        to: Option<String>,
    },
    /// The column taking attributes without a column of their own.
    ExtraChanged {
        from: Option<String>,
        to: Option<String>,
    },
    ColumnAdded {
        column: String,
        ty: String,
    },
    ColumnGone {
        column: String,
        ty: String,
    },
    /// The column's type: `from` and `to` are [`ColumnType::label`]s.
    Type {
        column: String,
        kind: TypeChange,
        from: String,
        to: String,
    },
    /// A field metadata value (`dynamodb.type`) of the column, or of a field inside it (`path`
    /// such as `address.zip`, `tags[]`).
    Metadata {
        column: String,
        path: String,
        key: String,
        from: Option<String>,
        to: Option<String>,
    },
    /// The attribute the column reads.
    Source {
        column: String,
        from: String,
        to: String,
    },
    Nullable {
        column: String,
        from: bool,
        to: bool,
    },
}

impl Drift {
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// Changes in all tables.
    pub fn changes(&self) -> usize {
        self.tables.iter().map(|t| t.changes.len()).sum()
    }

    /// Every column widening, as `(table, column, from, to)`.
    pub fn widenings(&self) -> impl Iterator<Item = (&str, &str, &str, &str)> {
        self.tables.iter().flat_map(|t| {
            t.changes.iter().filter_map(move |c| match c {
                Change::Type { column, kind: TypeChange::Widened, from, to } => {
                    Some((t.table.as_str(), column.as_str(), from.as_str(), to.as_str()))
                }
                _ => None,
            })
        })
    }

    /// `1 table added, 2 columns added, 1 column widened, …`: a one-line count of the changes.
    pub fn counts(&self) -> String {
        let mut n: BTreeMap<(u8, &'static str, &'static str), usize> = BTreeMap::new();
        for c in self.tables.iter().flat_map(|t| &t.changes) {
            let key = match c {
                Change::TableAdded { .. } => (0, "table added", "tables added"),
                Change::TableGone { .. } => (1, "table gone", "tables gone"),
                Change::EntityChanged { .. } => (2, "entity changed", "entities changed"),
                Change::ExtraChanged { .. } => (3, "extra column changed", "extra columns changed"),
                Change::ColumnAdded { .. } => (4, "column added", "columns added"),
                Change::ColumnGone { .. } => (5, "column gone", "columns gone"),
                Change::Type { kind: TypeChange::Widened, .. } => (6, "column widened", "columns widened"),
                Change::Type { kind: TypeChange::Narrowed, .. } => (7, "column narrowed", "columns narrowed"),
                Change::Type { kind: TypeChange::Retyped, .. } => (8, "column retyped", "columns retyped"),
                Change::Metadata { .. } => (9, "metadata change", "metadata changes"),
                Change::Source { .. } => (10, "source change", "source changes"),
                Change::Nullable { .. } => (11, "nullability change", "nullability changes"),
            };
            *n.entry(key).or_default() += 1;
        }
        n.into_iter()
            .map(|((_, one, many), k)| if k == 1 { format!("1 {one}") } else { format!("{k} {many}") })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The drift from the contracts `old` to `new` (each table once; the order given is irrelevant).
pub fn diff(old: &[TableSchema], new: &[TableSchema]) -> Drift {
    let old: BTreeMap<&str, &TableSchema> = old.iter().map(|t| (t.table.as_str(), t)).collect();
    let new: BTreeMap<&str, &TableSchema> = new.iter().map(|t| (t.table.as_str(), t)).collect();
    let mut names: Vec<&str> = old.keys().chain(new.keys()).copied().collect();
    names.sort_unstable();
    names.dedup();
    let mut tables = Vec::new();
    for name in names {
        let changes = match (old.get(name), new.get(name)) {
            (None, Some(n)) => vec![Change::TableAdded { columns: n.columns.len() }],
            (Some(o), None) => vec![Change::TableGone { columns: o.columns.len() }],
            (Some(o), Some(n)) => table_changes(o, n),
            (None, None) => Vec::new(),
        };
        if !changes.is_empty() {
            tables.push(TableDrift { table: name.to_owned(), changes });
        }
    }
    Drift { tables }
}

fn table_changes(old: &TableSchema, new: &TableSchema) -> Vec<Change> {
    let mut out = Vec::new();
    if old.entity != new.entity {
        out.push(Change::EntityChanged { from: old.entity.clone(), to: new.entity.clone() });
    }
    if old.extra != new.extra {
        out.push(Change::ExtraChanged { from: old.extra.clone(), to: new.extra.clone() });
    }
    let find = |cols: &'_ [Column], name: &str| cols.iter().position(|c| c.name == name);
    for n in &new.columns {
        match find(&old.columns, &n.name) {
            None => out.push(Change::ColumnAdded { column: n.name.clone(), ty: n.ty.label() }),
            Some(i) => column_changes(&old.columns[i], n, &mut out),
        }
    }
    for o in &old.columns {
        if find(&new.columns, &o.name).is_none() {
            out.push(Change::ColumnGone { column: o.name.clone(), ty: o.ty.label() });
        }
    }
    out
}

fn column_changes(old: &Column, new: &Column, out: &mut Vec<Change>) {
    let column = || new.name.clone();
    let same_type = same_shape(&old.ty, &new.ty);
    if !same_type {
        let kind = if widens(&old.ty, &new.ty) {
            TypeChange::Widened
        } else if widens(&new.ty, &old.ty) {
            TypeChange::Narrowed
        } else {
            TypeChange::Retyped
        };
        out.push(Change::Type { column: column(), kind, from: old.ty.label(), to: new.ty.label() });
    }
    let old_meta = metadata(&old.ty, &old.seen);
    let new_meta = metadata(&new.ty, &new.seen);
    if same_type {
        // Same shape: the same fields, so compare each field's metadata.
        for ((path, a), (_, b)) in old_meta.iter().zip(&new_meta) {
            if a != b {
                out.push(Change::Metadata {
                    column: column(),
                    path: path.clone(),
                    key: META_DYNAMODB_TYPE.to_owned(),
                    from: a.clone(),
                    to: b.clone(),
                });
            }
        }
    } else {
        // Another shape: the column's own metadata says what the values were.
        let (a, b) = (old_meta.first().and_then(|m| m.1.clone()), new_meta.first().and_then(|m| m.1.clone()));
        if a != b {
            out.push(Change::Metadata {
                column: column(),
                path: String::new(),
                key: META_DYNAMODB_TYPE.to_owned(),
                from: a,
                to: b,
            });
        }
    }
    if old.source != new.source {
        out.push(Change::Source { column: column(), from: old.source.clone(), to: new.source.clone() });
    }
    if old.nullable != new.nullable {
        out.push(Change::Nullable { column: column(), from: old.nullable, to: new.nullable });
    }
}

/// The contract of a table after rows of `rows` (the contract inferred from them alone) are
/// merged into a table of contract `table` without rewriting it: the table's columns with their
/// types (an `int64` column of the rows goes exactly into a `decimal` column with room for 19
/// integer digits, a `decimal` into one of a scale at least its own, a column of nulls into any),
/// then the columns only the rows have, nullable (the table's rows lack
/// them); the counts of types seen are the table's plus the rows'. `Err(reason)` when the rows
/// do not fit without rewriting the table: another type, a column the rows leave null that the
/// table's contract says is never null, another extra column, or a new column whose attribute
/// or name (without regard to case) the table already has. The same holds inside lists, maps
/// and structs: both sinks that apply in place (the Parquet rewrite, the Delta MERGE) cast
/// nested types strictly.
///
/// With `widen` (a sink that rewrites the table's files that do not have its new schema: the
/// Parquet rewrite), a column whose table type goes exactly into the rows' type by the same
/// rules takes the rows' type instead (an `int64` column becomes the rows' `decimal`, a
/// `decimal` one of a larger scale; inside structs, the counts of types seen are then the
/// rows'): the table's values are cast into it, strictly, when its files are rewritten.
pub fn extend(table: &TableSchema, rows: &TableSchema, widen: bool) -> Result<TableSchema, String> {
    if table.extra != rows.extra {
        return Err("the column of attributes kept out of columns differs".into());
    }
    let mut out = table.clone();
    for c in &mut out.columns {
        if !c.nullable && !rows.columns.iter().any(|r| r.name == c.name && !r.nullable) {
            return Err(format!("column `{}` is never null in the table, and the changed rows leave it null", c.name));
        }
    }
    for r in &rows.columns {
        match out.columns.iter_mut().find(|c| c.name == r.name) {
            Some(c) => {
                if c.source != r.source {
                    return Err(format!(
                        "column `{}` reads `{}` in the table and `{}` in the changed rows",
                        c.name, c.source, r.source
                    ));
                }
                if !fits(&r.ty, &c.ty) {
                    if !(widen && fits(&c.ty, &r.ty)) {
                        let (mut was, mut now) = (c.ty.label(), r.ty.label());
                        if was == now {
                            // Nested types that differ inside: the whole types.
                            (was, now) = (c.ty.arrow().to_string(), r.ty.arrow().to_string());
                        }
                        return Err(format!(
                            "column `{}` is `{was}` in the table and `{now}` in the changed rows",
                            c.name
                        ));
                    }
                    c.ty = r.ty.clone();
                }
                for (k, n) in &r.seen {
                    *c.seen.entry(k.clone()).or_default() += n;
                }
            }
            None => {
                if let Some(c) =
                    out.columns.iter().find(|c| c.source == r.source || c.name.eq_ignore_ascii_case(&r.name))
                {
                    return Err(format!(
                        "attribute `{}` of the changed rows would be column `{}` beside the table's `{}`",
                        r.source, r.name, c.name
                    ));
                }
                out.columns.push(Column { nullable: true, ..r.clone() });
            }
        }
    }
    Ok(out)
}

/// Whether every value of the changed rows' type `from` goes exactly into the table's type `to`,
/// value by value (the sink casts strictly, and a value that does not fit stops it): the same
/// shape, an `int64` into a `decimal` with room for 19 integer digits, a `decimal` into one of a
/// scale at least its own, nulls into anything; and inside lists (a set into a set), maps and
/// structs (the same fields in the same order).
fn fits(from: &ColumnType, to: &ColumnType) -> bool {
    use ColumnType as T;
    if same_shape(to, from) {
        return true;
    }
    match (from, to) {
        (T::Int64, T::Decimal { precision, scale }) => i16::from(*precision) - i16::from(*scale) >= 19,
        (T::Decimal { scale: s, .. }, T::Decimal { scale: t, .. }) => t >= s,
        (T::Null, _) => true,
        (T::List { element: x, set: s }, T::List { element: y, set: t }) => s == t && fits(x, y),
        (T::Struct { fields: x }, T::Struct { fields: y }) => {
            x.len() == y.len() && x.iter().zip(y).all(|(f, g)| f.name == g.name && fits(&f.ty, &g.ty))
        }
        (T::Map { value: x }, T::Map { value: y }) => fits(x, y),
        _ => false,
    }
}

/// The same type, whatever the counts of types seen inside structs.
fn same_shape(a: &ColumnType, b: &ColumnType) -> bool {
    match (a, b) {
        (ColumnType::List { element: x, set: s }, ColumnType::List { element: y, set: t }) => {
            s == t && same_shape(x, y)
        }
        (ColumnType::Struct { fields: x }, ColumnType::Struct { fields: y }) => {
            x.len() == y.len() && x.iter().zip(y).all(|(f, g)| f.name == g.name && same_shape(&f.ty, &g.ty))
        }
        (ColumnType::Map { value: x }, ColumnType::Map { value: y }) => same_shape(x, y),
        _ => a == b,
    }
}

/// Whether every value of type `from` is held exactly by type `to`, through the widenings
/// inference makes (`from` and `to` differ in shape).
pub fn widens(from: &ColumnType, to: &ColumnType) -> bool {
    use ColumnType as T;
    if same_shape(from, to) {
        return true;
    }
    match (from, to) {
        // A column of nulls takes any type; any value is kept as DynamoDB JSON text.
        (T::Null, _) | (_, T::Json) => true,
        (T::Int64, T::Decimal { .. } | T::DecimalText) => true,
        // A larger scale, as inference chooses when a value has more fractional digits (the
        // values seen always fit: inference checked them).
        (T::Decimal { precision: p, scale: s }, T::Decimal { precision: q, scale: t }) => t >= s && q >= p,
        (T::Decimal { .. }, T::DecimalText) => true,
        (T::List { element: x, set: s }, T::List { element: y, set: t }) => s == t && widens(x, y),
        (T::Map { value: x }, T::Map { value: y }) => widens(x, y),
        (T::Struct { fields: x }, T::Struct { fields: y }) => x.iter().all(|f| struct_field_widens(f, y)),
        _ => false,
    }
}

fn struct_field_widens(f: &StructField, into: &[StructField]) -> bool {
    into.iter().any(|g| g.name == f.name && widens(&f.ty, &g.ty))
}

/// Each field's `dynamodb.type` metadata, the column's own first (path `""`), then nested fields
/// depth first (`address.zip`, `tags[]`), as the Parquet schema carries them.
fn metadata(ty: &ColumnType, seen: &BTreeMap<String, u64>) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let field = ty.field("", Some(seen_label(seen)));
    walk(field.data_type(), String::new(), field.metadata().get(META_DYNAMODB_TYPE).cloned(), &mut out);
    out
}

fn walk(
    dt: &datafusion::arrow::datatypes::DataType,
    path: String,
    own: Option<String>,
    out: &mut Vec<(String, Option<String>)>,
) {
    use datafusion::arrow::datatypes::DataType as D;
    out.push((path.clone(), own));
    let meta = |f: &datafusion::arrow::datatypes::Field| f.metadata().get(META_DYNAMODB_TYPE).cloned();
    match dt {
        D::List(f) => walk(f.data_type(), format!("{path}[]"), meta(f), out),
        D::Struct(fields) => {
            for f in fields {
                let p = if path.is_empty() { f.name().clone() } else { format!("{path}.{}", f.name()) };
                walk(f.data_type(), p, meta(f), out);
            }
        }
        D::Map(entries, _) => walk(entries.data_type(), format!("{path}{{}}"), None, out),
        _ => {}
    }
}

impl fmt::Display for TypeChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TypeChange::Widened => "widened",
            TypeChange::Narrowed => "narrowed",
            TypeChange::Retyped => "retyped",
        })
    }
}

fn of_columns(n: usize) -> String {
    if n == 1 { "1 column".to_owned() } else { format!("{n} columns") }
}

fn opt(v: &Option<String>) -> String {
    match v {
        Some(s) => format!("`{s}`"),
        None => "none".to_owned(),
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nullable = |b: bool| if b { "nullable" } else { "not null" };
        match self {
            Change::TableAdded { columns } => write!(f, "table added ({})", of_columns(*columns)),
            Change::TableGone { columns } => write!(f, "table gone ({})", of_columns(*columns)),
            Change::EntityChanged { from, to } => write!(f, "entity {} -> {}", opt(from), opt(to)),
            Change::ExtraChanged { from, to } => write!(f, "extra column {} -> {}", opt(from), opt(to)),
            Change::ColumnAdded { column, ty } => write!(f, "column `{column}` added: {ty}"),
            Change::ColumnGone { column, ty } => write!(f, "column `{column}` gone: {ty}"),
            Change::Type { column, kind, from, to } => write!(f, "column `{column}` {kind}: {from} -> {to}"),
            Change::Metadata { column, path, key, from, to } => {
                let at = if path.is_empty() { String::new() } else { format!(" field `{path}`") };
                write!(f, "column `{column}`{at} metadata `{key}`: {} -> {}", opt(from), opt(to))
            }
            Change::Source { column, from, to } => write!(f, "column `{column}` reads attribute `{from}` -> `{to}`"),
            Change::Nullable { column, from, to } => {
                write!(f, "column `{column}` {} -> {}", nullable(*from), nullable(*to))
            }
        }
    }
}

/// One table per paragraph: `table `user`:` then one change per indented line.
impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.tables {
            writeln!(f, "table `{}`:", t.table)?;
            for c in &t.changes {
                writeln!(f, "  {c}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: ColumnType, seen: &[(&str, u64)]) -> Column {
        Column {
            name: name.into(),
            source: name.into(),
            ty,
            nullable: true,
            seen: seen.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        }
    }

    fn table(name: &str, columns: Vec<Column>) -> TableSchema {
        TableSchema { table: name.into(), entity: Some(name.to_uppercase()), columns, extra: None }
    }

    fn dec(scale: i8) -> ColumnType {
        ColumnType::Decimal { precision: 38, scale }
    }

    #[test]
    fn changed_rows_extend_a_contract_only_where_they_fit_it() {
        let mut pk = col("pk", ColumnType::Utf8, &[("S", 10)]);
        pk.nullable = false;
        let before = table("u", vec![pk.clone(), col("n", dec(2), &[("N", 10)]), col("gone", ColumnType::Bool, &[])]);
        let mut new_pk = col("pk", ColumnType::Utf8, &[("S", 2)]);
        new_pk.nullable = false;
        let mut added = col("added", ColumnType::Utf8, &[("S", 2)]);
        added.nullable = false;
        let rows = table("u", vec![new_pk.clone(), col("n", ColumnType::Int64, &[("N", 2)]), added]);
        let got = extend(&before, &rows, false).unwrap();
        let names: Vec<&str> = got.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["pk", "n", "gone", "added"], "the table's columns, then the new ones");
        assert_eq!(got.columns[1].ty, dec(2), "an int64 goes into the decimal");
        assert_eq!(got.columns[0].seen, [("S".to_owned(), 12)].into(), "counts add up");
        assert!(got.columns[3].nullable, "the table's rows lack an added column");
        assert!(!got.columns[0].nullable);

        let other = |c: Column| table("u", vec![new_pk.clone(), c]);
        let err = |r: &TableSchema| extend(&before, r, false).unwrap_err();
        assert!(err(&other(col("n", ColumnType::Utf8, &[("S", 1)]))).contains("column `n`"));
        assert!(err(&other(col("n", ColumnType::Json, &[("S", 1), ("N", 1)]))).contains("column `n`"));
        assert!(err(&other(col("n", dec(3), &[("N", 1)]))).contains("column `n`"));
        // Rewriting the table's files: a larger scale widens the column; text never does.
        assert_eq!(extend(&before, &other(col("n", dec(3), &[("N", 1)])), true).unwrap().columns[1].ty, dec(3));
        let text = other(col("n", ColumnType::Utf8, &[("S", 1)]));
        assert!(extend(&before, &text, true).unwrap_err().contains("column `n`"));
        assert_eq!(extend(&before, &other(col("n", dec(1), &[("N", 1)])), false).unwrap().columns[1].ty, dec(2));
        let nulls = other(col("n", ColumnType::Null, &[("NULL", 1)]));
        assert_eq!(extend(&before, &nulls, false).unwrap().columns[1].ty, dec(2));
        assert!(err(&other(col("N", ColumnType::Utf8, &[("S", 1)]))).contains("beside the table's `n`"));
        let mut renamed = col("n_2", ColumnType::Int64, &[("N", 1)]);
        renamed.source = "n".into();
        assert!(err(&other(renamed)).contains("attribute `n`"));
        // A column the table never has null, which a changed row lacks.
        assert!(err(&table("u", vec![col("n", ColumnType::Int64, &[("N", 1)])])).contains("column `pk`"));
        // Inside a struct or a list, what fits at the top level fits.
        let field = |name: &str, ty: ColumnType| StructField { name: name.into(), ty, seen: BTreeMap::new() };
        let shipping = |cost: ColumnType| ColumnType::Struct {
            fields: vec![field("cost", cost), field("method", ColumnType::Utf8)],
        };
        let list = |cost: ColumnType| ColumnType::List { element: Box::new(shipping(cost)), set: None };
        let before = table(
            "o",
            vec![pk.clone(), col("ship", shipping(dec(2)), &[("M", 3)]), col("lines", list(dec(2)), &[("L", 3)])],
        );
        let rows = table(
            "o",
            vec![
                new_pk.clone(),
                col("ship", shipping(ColumnType::Int64), &[("M", 1)]),
                col("lines", list(dec(1)), &[("L", 1)]),
            ],
        );
        let got = extend(&before, &rows, false).unwrap();
        assert_eq!((&got.columns[1].ty, &got.columns[2].ty), (&shipping(dec(2)), &list(dec(2))));
        let wider = table("o", vec![new_pk.clone(), col("ship", shipping(dec(3)), &[("M", 1)])]);
        assert!(extend(&before, &wider, false).unwrap_err().contains("column `ship`"));
        // Rewriting the table's files, its struct takes the rows' larger scale.
        assert_eq!(extend(&before, &wider, true).unwrap().columns[1].ty, shipping(dec(3)));
        let text = table("o", vec![new_pk.clone(), col("ship", shipping(ColumnType::Utf8), &[("M", 1)])]);
        assert!(extend(&before, &text, true).unwrap_err().contains("column `ship`"));
        let extra = TableSchema { extra: Some("_extra".into()), ..rows.clone() };
        assert!(err(&extra).contains("kept out of columns"));
    }

    #[test]
    fn equal_contracts_have_no_drift_whatever_the_counts() {
        let a = table("u", vec![col("pk", ColumnType::Utf8, &[("S", 3)]), col("n", ColumnType::Int64, &[("N", 3)])]);
        let mut b = a.clone();
        b.columns[1].seen.insert("N".into(), 900);
        let d = diff(std::slice::from_ref(&a), std::slice::from_ref(&b));
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(d.to_string(), "");
    }

    #[test]
    fn tables_and_columns_added_gone_widened_in_a_fixed_order() {
        let old = vec![
            table("b", vec![col("pk", ColumnType::Utf8, &[("S", 1)])]),
            table("a", vec![col("pk", ColumnType::Utf8, &[("S", 1)]), col("n", ColumnType::Int64, &[("N", 1)])]),
            table("gone", vec![col("pk", ColumnType::Utf8, &[("S", 1)])]),
        ];
        let new = vec![
            table("a", vec![col("pk", ColumnType::Utf8, &[("S", 1)]), col("n", dec(2), &[("N", 2)])]),
            table("c", vec![col("pk", ColumnType::Utf8, &[("S", 1)]), col("x", ColumnType::Bool, &[("BOOL", 1)])]),
            table(
                "b",
                vec![col("pk", ColumnType::Utf8, &[("S", 1)]), col("new", ColumnType::Json, &[("N", 1), ("S", 1)])],
            ),
        ];
        let d = diff(&old, &new);
        assert_eq!(
            d.to_string(),
            "table `a`:\n  column `n` widened: int64 -> decimal(38,2)\n\
             table `b`:\n  column `new` added: json\n\
             table `c`:\n  table added (2 columns)\n\
             table `gone`:\n  table gone (1 column)\n"
        );
        assert_eq!(d.counts(), "1 table added, 1 table gone, 1 column added, 1 column widened");
        assert_eq!(d.widenings().collect::<Vec<_>>(), vec![("a", "n", "int64", "decimal(38,2)")]);
        // The same contracts in another order give the same drift.
        let mut old2 = old.clone();
        old2.reverse();
        assert_eq!(diff(&old2, &new), d);
        // Back again: every change mirrors.
        let back = diff(&new, &old);
        assert_eq!(back.counts(), "1 table added, 1 table gone, 1 column gone, 1 column narrowed");
    }

    #[test]
    fn every_inference_widening_is_a_widening() {
        use ColumnType as T;
        let list = |e: T| T::List { element: Box::new(e), set: None };
        let ns = |e: T| T::List { element: Box::new(e), set: Some(super::super::SetKind::NS) };
        let field = |n: &str, ty: T| StructField { name: n.into(), ty, seen: BTreeMap::new() };
        let widenings = [
            (T::Int64, dec(0)),
            (T::Int64, dec(3)),
            (dec(1), dec(3)),
            (T::Int64, T::DecimalText),
            (dec(5), T::DecimalText),
            (T::Null, T::Utf8),
            (T::Null, T::Int64),
            (T::Utf8, T::Json),
            (T::Int64, T::Json),
            (T::DecimalText, T::Json),
            (list(T::Int64), list(dec(2))),
            (ns(T::Int64), ns(T::DecimalText)),
            (list(T::Utf8), T::Json),
            (
                T::Struct { fields: vec![field("a", T::Int64)] },
                T::Struct { fields: vec![field("a", dec(1)), field("b", T::Utf8)] },
            ),
            (T::Map { value: Box::new(T::Int64) }, T::Map { value: Box::new(dec(2)) }),
        ];
        for (from, to) in &widenings {
            assert!(widens(from, to), "{} -> {}", from.label(), to.label());
            assert!(!widens(to, from), "{} -> {} is not a widening", to.label(), from.label());
        }
        for (from, to) in [(T::Utf8, T::Int64), (T::Bool, T::Utf8), (list(T::Utf8), ns(T::Int64)), (T::Float64, dec(2))]
        {
            assert!(!widens(&from, &to) && !widens(&to, &from), "{} <-> {}", from.label(), to.label());
        }
        let a = table("t", vec![col("v", T::Utf8, &[("S", 1)])]);
        let b = table("t", vec![col("v", T::Bool, &[("BOOL", 1)])]);
        assert!(matches!(diff(&[a], &[b]).tables[0].changes[0], Change::Type { kind: TypeChange::Retyped, .. }));
    }

    #[test]
    fn metadata_source_nullability_entity_and_extra() {
        let field = |n: &str, ty: ColumnType, seen: &[(&str, u64)]| StructField {
            name: n.into(),
            ty,
            seen: seen.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        };
        let st = |zip: &[(&str, u64)]| ColumnType::Struct { fields: vec![field("zip", ColumnType::Utf8, zip)] };
        let old = table(
            "u",
            vec![
                col("addr", st(&[("S", 2)]), &[("M", 2)]),
                col("e", ColumnType::Utf8, &[("S", 2)]),
                col("k", ColumnType::Utf8, &[("S", 2)]),
            ],
        );
        let mut new = table(
            "u",
            vec![
                col("addr", st(&[("S", 2), ("NULL", 1)]), &[("M", 3)]),
                col("e", ColumnType::Utf8, &[("S", 2), ("NULL", 4)]),
                col("k", ColumnType::Utf8, &[("S", 2)]),
            ],
        );
        // NULL alongside another type does not change the label; alone it does.
        assert!(diff(std::slice::from_ref(&old), std::slice::from_ref(&new)).is_empty());
        new.columns[1].seen = [("NULL".to_owned(), 4)].into();
        new.columns[1].ty = ColumnType::Null;
        new.columns[0].ty = st(&[("NULL", 1)]);
        new.columns[2].source = "K".into();
        new.columns[2].nullable = false;
        new.entity = Some("User".into());
        new.extra = Some("_extra".into());
        let d = diff(&[old], &[new]);
        assert_eq!(
            d.to_string(),
            "table `u`:\n  entity `U` -> `User`\n  extra column none -> `_extra`\n  \
             column `addr` field `zip` metadata `dynamodb.type`: `S` -> `NULL`\n  \
             column `e` narrowed: string -> null\n  column `e` metadata `dynamodb.type`: `S` -> `NULL`\n  \
             column `k` reads attribute `k` -> `K`\n  column `k` nullable -> not null\n"
        );
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["tables"][0]["changes"][3]["change"], "type");
        assert_eq!(json["tables"][0]["changes"][3]["kind"], "narrowed");
        assert_eq!(serde_json::from_value::<Drift>(json).unwrap(), d);
    }

    proptest::proptest! {
        /// Whatever the contracts, the drift from a set to itself is empty, a diff lists each
        /// table at most once in name order, and the drift from `a` to `b` has as many tables
        /// as the drift from `b` to `a`.
        #[test]
        fn drift_is_ordered_and_symmetric_in_tables(
            a in proptest::collection::vec((0u8..4, proptest::collection::vec((0u8..4, 0u8..5), 0..4)), 0..4),
            b in proptest::collection::vec((0u8..4, proptest::collection::vec((0u8..4, 0u8..5), 0..4)), 0..4),
        ) {
            let types = [ColumnType::Null, ColumnType::Int64, dec(2), ColumnType::DecimalText, ColumnType::Json];
            let make = |spec: &Vec<(u8, Vec<(u8, u8)>)>| {
                let mut by_name: BTreeMap<String, TableSchema> = BTreeMap::new();
                for (t, cols) in spec {
                    let mut columns: Vec<Column> = Vec::new();
                    for (c, ty) in cols {
                        let name = format!("c{c}");
                        if columns.iter().all(|x| x.name != name) {
                            columns.push(col(&name, types[*ty as usize].clone(), &[("N", 1)]));
                        }
                    }
                    by_name.insert(format!("t{t}"), table(&format!("t{t}"), columns));
                }
                by_name.into_values().collect::<Vec<_>>()
            };
            let (a, b) = (make(&a), make(&b));
            proptest::prop_assert!(diff(&a, &a).is_empty());
            let d = diff(&a, &b);
            let names: Vec<&str> = d.tables.iter().map(|t| t.table.as_str()).collect();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            sorted.dedup();
            proptest::prop_assert_eq!(&names, &sorted);
            proptest::prop_assert_eq!(d.tables.len(), diff(&b, &a).tables.len());
            for (_, _, from, to) in d.widenings() {
                proptest::prop_assert_ne!(from, to);
            }
        }
    }
}
