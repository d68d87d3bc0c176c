//! Schema inference from every item of an entity.
//!
//! Each attribute accumulates a [`Shape`]: how often each DynamoDB type occurred and, for
//! numbers, the widest integer part and scale. Shapes merge associatively, so parallel workers
//! produce the same schema whatever the thread count. [`resolve`] then applies these rules:
//!
//! - numbers: `int64` when every value is integral and fits; else `decimal(38, s)` when every
//!   value fits 38 digits at the largest scale `s` seen; else exact decimal text. Never a float.
//! - `S` string, `B` binary, `BOOL` bool; sets are lists tagged `SS`/`NS`/`BS` in field metadata.
//! - `L` is a typed list when all elements share one type, else JSON text.
//! - `M` is a struct when its field names are stable (at most [`MAX_STRUCT_FIELDS`] distinct
//!   names over all items), else JSON text; struct fields follow the same rules recursively.
//! - `NULL` is a null of whatever type the other values have.
//! - An attribute seen with two or more types (NULL aside) becomes JSON text holding each value
//!   as DynamoDB JSON, so no type information is lost.
//!
//! Every choice that is not the narrowest type for some value is recorded as a [`Widening`].

use std::collections::{BTreeMap, HashMap};

use crate::decode::{Item, Number, TypeTag, Value};
use crate::schema::{
    Column, ColumnType, DECIMAL_PRECISION, Demoted, ENCODING_PREFIX, Renamed, SetKind, StructField, TableSchema,
    Widening,
};

/// A map with more distinct field names than this over all items is kept as JSON text.
pub const MAX_STRUCT_FIELDS: usize = 64;

/// An inferred table has at most this many attribute columns. Beyond it (entities with dynamic
/// attribute names such as `stat#2026-01-01`), only attributes present in at least
/// [`MIN_SHARE_PERCENT`] of the entity's items are columns, most frequent first, and every other
/// attribute goes to the table's extra column as a DynamoDB JSON item.
pub const MAX_COLUMNS: usize = 1024;
/// See [`MAX_COLUMNS`].
pub const MIN_SHARE_PERCENT: u64 = 1;
/// Distinct attribute names of one entity whose shapes are tracked. An entity with more names
/// keeps as columns only the attributes every one of its items has (their shapes are exact
/// whatever the order items were read in); the rest go to the extra column. This bounds the
/// memory of inference whatever the number of names.
pub const MAX_TRACKED_ATTRIBUTES: usize = 100_000;
/// The slot [`EntityShape::observe_slots`] gives an attribute it does not track.
pub const UNTRACKED: u32 = u32::MAX;
/// The name of the extra column of inferred tables (with a suffix if an attribute has it).
pub const EXTRA_COLUMN: &str = "_extra";

/// What numbers an attribute held.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NumShape {
    pub count: u64,
    /// Values that are integral and fit `i64`.
    pub int64: u64,
    /// Integral values beyond `i64`.
    pub big_int: u64,
    pub fractional: u64,
    pub max_int_digits: u32,
    pub max_scale: u32,
}

impl NumShape {
    fn observe(&mut self, n: &Number<'_>) {
        let s = n.stats();
        self.count += 1;
        if s.fits_i64 {
            self.int64 += 1;
        } else if s.scale == 0 {
            self.big_int += 1;
        } else {
            self.fractional += 1;
        }
        self.max_int_digits = self.max_int_digits.max(s.int_digits);
        self.max_scale = self.max_scale.max(s.scale);
    }

    fn merge(&mut self, o: &NumShape) {
        self.count += o.count;
        self.int64 += o.int64;
        self.big_int += o.big_int;
        self.fractional += o.fractional;
        self.max_int_digits = self.max_int_digits.max(o.max_int_digits);
        self.max_scale = self.max_scale.max(o.max_scale);
    }

    fn resolve(&self) -> (ColumnType, Option<String>) {
        if self.big_int == 0 && self.fractional == 0 {
            return (ColumnType::Int64, None);
        }
        if self.max_int_digits + self.max_scale <= u32::from(DECIMAL_PRECISION) {
            let ty = ColumnType::Decimal { precision: DECIMAL_PRECISION, scale: self.max_scale as i8 };
            let why = match (self.int64 > 0 || self.big_int > 0, self.fractional > 0) {
                (true, true) => format!(
                    "{} integral and {} fractional numbers: {}",
                    self.int64 + self.big_int,
                    self.fractional,
                    ty.label()
                ),
                (_, false) => format!("{} integers beyond int64: {}", self.big_int, ty.label()),
                (false, true) => return (ty, None),
            };
            return (ty, Some(why));
        }
        (
            ColumnType::DecimalText,
            Some(format!(
                "numbers need {} integer and {} fractional digits, more than decimal(38) holds: exact decimal text",
                self.max_int_digits, self.max_scale
            )),
        )
    }
}

/// Everything seen of one attribute (or one nested field, or the elements of lists).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    pub counts: [u64; 10],
    pub num: NumShape,
    /// Members of `NS` sets.
    pub set_num: NumShape,
    /// Elements of all `L` values.
    pub list: Option<Box<Shape>>,
    /// Fields of all `M` values; `None` in `map_fields` once there are too many names.
    pub map_fields: Option<BTreeMap<String, Shape>>,
    pub map_overflow: bool,
}

fn tag_index(t: TypeTag) -> usize {
    TypeTag::ALL.iter().position(|x| *x == t).unwrap_or(0)
}

impl Shape {
    pub fn count(&self, t: TypeTag) -> u64 {
        self.counts[tag_index(t)]
    }

    pub fn observe(&mut self, v: &Value<'_>) {
        self.counts[tag_index(v.tag())] += 1;
        match v {
            Value::N(n) => self.num.observe(n),
            Value::NS(ns) => ns.iter().for_each(|n| self.set_num.observe(n)),
            Value::L(items) => {
                let el = self.list.get_or_insert_with(Default::default);
                items.iter().for_each(|e| el.observe(e));
            }
            Value::M(fields) => {
                if self.map_overflow {
                    return;
                }
                let map = self.map_fields.get_or_insert_with(BTreeMap::new);
                for (k, e) in fields {
                    match map.get_mut(k.as_ref()) {
                        Some(s) => s.observe(e),
                        None => {
                            let mut s = Shape::default();
                            s.observe(e);
                            map.insert(k.to_string(), s);
                        }
                    }
                }
                if map.len() > MAX_STRUCT_FIELDS {
                    self.map_overflow = true;
                    self.map_fields = None;
                }
            }
            _ => {}
        }
    }

    pub fn merge(&mut self, o: &Shape) {
        for (a, b) in self.counts.iter_mut().zip(o.counts) {
            *a += b;
        }
        self.num.merge(&o.num);
        self.set_num.merge(&o.set_num);
        if let Some(ol) = &o.list {
            self.list.get_or_insert_with(Default::default).merge(ol);
        }
        if o.map_overflow {
            self.map_overflow = true;
        }
        if self.map_overflow {
            self.map_fields = None;
        } else if let Some(of) = &o.map_fields {
            let map = self.map_fields.get_or_insert_with(BTreeMap::new);
            for (k, s) in of {
                map.entry(k.clone()).or_default().merge(s);
            }
            if map.len() > MAX_STRUCT_FIELDS {
                self.map_overflow = true;
                self.map_fields = None;
            }
        }
    }

    /// Types seen with their counts, keyed by DynamoDB type key.
    pub fn seen(&self) -> BTreeMap<String, u64> {
        TypeTag::ALL.iter().zip(self.counts).filter(|(_, c)| *c > 0).map(|(t, c)| (t.key().to_owned(), c)).collect()
    }
}

/// Resolves a shape to a column type, recording widenings under `path`.
pub fn resolve(shape: &Shape, table: &str, path: &str, widenings: &mut Vec<Widening>) -> ColumnType {
    let non_null: Vec<TypeTag> =
        TypeTag::ALL.into_iter().filter(|t| *t != TypeTag::Null && shape.count(*t) > 0).collect();
    let mut widen = |chosen: &ColumnType, reason: String| {
        widenings.push(Widening {
            table: table.to_owned(),
            column: path.to_owned(),
            seen: shape.seen(),
            chosen: chosen.label(),
            reason,
        });
    };
    match non_null.as_slice() {
        [] => ColumnType::Null,
        [TypeTag::S] => ColumnType::Utf8,
        [TypeTag::B] => ColumnType::Binary,
        [TypeTag::Bool] => ColumnType::Bool,
        [TypeTag::N] => {
            let (ty, why) = shape.num.resolve();
            if let Some(why) = why {
                widen(&ty, why);
            }
            ty
        }
        [TypeTag::SS] => ColumnType::List { element: Box::new(ColumnType::Utf8), set: Some(SetKind::SS) },
        [TypeTag::BS] => ColumnType::List { element: Box::new(ColumnType::Binary), set: Some(SetKind::BS) },
        [TypeTag::NS] => {
            let (el, why) = shape.set_num.resolve();
            let ty = ColumnType::List { element: Box::new(el), set: Some(SetKind::NS) };
            if let Some(why) = why {
                widen(&ty, format!("set members: {why}"));
            }
            ty
        }
        [TypeTag::L] => {
            let Some(el) = shape.list.as_deref().filter(|el| el.counts.iter().sum::<u64>() > 0) else {
                let ty = ColumnType::Json;
                widen(&ty, "every list was empty, so the element type is unknown: json".into());
                return ty;
            };
            let el_types = TypeTag::ALL.into_iter().filter(|t| *t != TypeTag::Null && el.count(*t) > 0).count();
            if el_types > 1 {
                let ty = ColumnType::Json;
                widen(&ty, format!("list elements of several types ({}): json", crate::schema::seen_label(&el.seen())));
                return ty;
            }
            let element = resolve(el, table, &format!("{path}[]"), widenings);
            ColumnType::List { element: Box::new(element), set: None }
        }
        [TypeTag::M] => match &shape.map_fields {
            Some(fields) if case_collision(fields.keys()).is_some() => {
                let ty = ColumnType::Json;
                let (a, b) = case_collision(fields.keys()).unwrap_or_default();
                widen(&ty, format!("map field names `{a}` and `{b}` differ only in case: json"));
                ty
            }
            Some(fields) if !fields.is_empty() => ColumnType::Struct {
                fields: fields
                    .iter()
                    .map(|(name, s)| StructField {
                        name: name.clone(),
                        ty: resolve(s, table, &format!("{path}.{name}"), widenings),
                        seen: s.seen(),
                    })
                    .collect(),
            },
            Some(_) => {
                let ty = ColumnType::Json;
                widen(&ty, "every map was empty: json".into());
                ty
            }
            None => {
                let ty = ColumnType::Json;
                widen(&ty, format!("maps with more than {MAX_STRUCT_FIELDS} distinct field names: json"));
                ty
            }
        },
        several => {
            let ty = ColumnType::Json;
            let names: Vec<&str> = several.iter().map(|t| t.key()).collect();
            widen(&ty, format!("values of several types ({}): json (each value as DynamoDB JSON)", names.join(", ")));
            ty
        }
    }
}

/// Two names among `names` that are equal without regard to case, if any.
fn case_collision<'n>(names: impl Iterator<Item = &'n String>) -> Option<(String, String)> {
    let mut seen: HashMap<String, &str> = HashMap::new();
    for n in names {
        if let Some(first) = seen.insert(n.to_lowercase(), n) {
            return Some((first.to_owned(), n.clone()));
        }
    }
    None
}

/// Where an attribute was first seen, to order columns as the data does.
pub type FirstSeen = (u32, u64, u32);

/// Shapes of every attribute of one entity. Serialized (for sharded runs, whose shards merge
/// their shapes) without the name index, which is rebuilt when read.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(from = "EntityShapeWire")]
pub struct EntityShape {
    pub items: u64,
    attrs: Vec<(Box<str>, FirstSeen, Shape)>,
    #[serde(skip)]
    index: HashMap<Box<str>, usize>,
    /// More than [`MAX_TRACKED_ATTRIBUTES`] names were seen: some are not tracked.
    overflowed: bool,
    /// The highest file index observed. An item of a lower file (pass one reads the largest
    /// files first) may meet a known attribute earlier in the input than where it was first met.
    #[serde(skip)]
    latest_file: u32,
}

/// A table's schema as inference chose it, with what it kept out of the columns and renamed.
#[derive(Debug, Clone)]
pub struct InferredSchema {
    pub schema: TableSchema,
    pub demoted: Option<Demoted>,
    pub renamed: Vec<Renamed>,
}

/// Equal when the same attributes have the same shapes, whatever order workers met them in.
impl PartialEq for EntityShape {
    fn eq(&self, other: &EntityShape) -> bool {
        fn sorted(s: &EntityShape) -> Vec<&(Box<str>, FirstSeen, Shape)> {
            let mut a: Vec<&(Box<str>, FirstSeen, Shape)> = s.attrs.iter().collect();
            a.sort_by(|x, y| x.0.cmp(&y.0));
            a
        }
        self.items == other.items && self.overflowed == other.overflowed && sorted(self) == sorted(other)
    }
}

#[derive(serde::Deserialize)]
struct EntityShapeWire {
    items: u64,
    attrs: Vec<(Box<str>, FirstSeen, Shape)>,
    overflowed: bool,
}

impl From<EntityShapeWire> for EntityShape {
    fn from(w: EntityShapeWire) -> EntityShape {
        let index = w.attrs.iter().enumerate().map(|(i, (n, _, _))| (n.clone(), i)).collect();
        EntityShape { items: w.items, attrs: w.attrs, index, overflowed: w.overflowed, latest_file: 0 }
    }
}

impl EntityShape {
    /// Records one item. `at` is (file index, line, position in item) of the item.
    pub fn observe(&mut self, item: &Item<'_>, file: u32, line: u64) {
        self.observe_slots(item, file, line, |_| {});
    }

    /// [`EntityShape::observe`], telling `slot` where each attribute went, in item order: its
    /// index in [`EntityShape::names`], or [`UNTRACKED`] for a name beyond
    /// [`MAX_TRACKED_ATTRIBUTES`]. The indexes are this shape's own (a worker's), never a merged one's.
    ///
    /// Each attribute keeps the earliest (file, line, position) it was met at, in whatever order
    /// files are observed; within a file, lines must come in increasing order.
    pub fn observe_slots(&mut self, item: &Item<'_>, file: u32, line: u64, mut slot: impl FnMut(u32)) {
        self.items += 1;
        // Only an item of a file below one already observed can move a known attribute earlier:
        // a comparison per attribute for such a file, a branch never taken otherwise.
        let earlier = file < self.latest_file;
        self.latest_file = self.latest_file.max(file);
        for (pos, (name, value)) in item.iter().enumerate() {
            // Items of one entity usually list attributes in the same order: try that slot first.
            let at = match self.attrs.get(pos) {
                Some((n, _, _)) if **n == **name => pos,
                _ => match self.index.get(name.as_ref()) {
                    Some(&i) => i,
                    None if self.attrs.len() >= MAX_TRACKED_ATTRIBUTES => {
                        self.overflowed = true;
                        slot(UNTRACKED);
                        continue;
                    }
                    None => {
                        let i = self.attrs.len();
                        let boxed: Box<str> = name.as_ref().into();
                        self.index.insert(boxed.clone(), i);
                        self.attrs.push((boxed, (file, line, pos as u32), Shape::default()));
                        i
                    }
                },
            };
            let attr = &mut self.attrs[at];
            if earlier {
                attr.1 = attr.1.min((file, line, pos as u32));
            }
            attr.2.observe(value);
            slot(at as u32);
        }
    }

    /// The attribute names in the order this shape first met them (the slots of
    /// [`EntityShape::observe_slots`]).
    pub fn names(&self) -> Vec<Box<str>> {
        self.attrs.iter().map(|(n, _, _)| n.clone()).collect()
    }

    pub fn merge(&mut self, other: &EntityShape) {
        self.items += other.items;
        self.overflowed |= other.overflowed;
        self.latest_file = self.latest_file.max(other.latest_file);
        for (name, first, shape) in &other.attrs {
            match self.index.get(name) {
                Some(&i) => {
                    let a = &mut self.attrs[i];
                    a.1 = a.1.min(*first);
                    a.2.merge(shape);
                }
                None => {
                    self.index.insert(name.clone(), self.attrs.len());
                    self.attrs.push((name.clone(), *first, shape.clone()));
                }
            }
        }
        // Merging happens once per worker at the end; the union may pass the bound, which then
        // holds for the merged shape as it would for one worker.
        if self.attrs.len() > MAX_TRACKED_ATTRIBUTES {
            self.overflowed = true;
        }
    }

    /// The table schema: columns in the order attributes first appear in the input, at most
    /// [`MAX_COLUMNS`] of them (see there), with names unique without regard to case.
    pub fn schema(&self, table: &str, entity: Option<&str>, widenings: &mut Vec<Widening>) -> InferredSchema {
        let present = |s: &Shape| s.counts.iter().sum::<u64>();
        let mut attrs: Vec<&(Box<str>, FirstSeen, Shape)> = self.attrs.iter().collect();
        // Which attributes are columns; the decision depends on counts only, never on the order
        // in which workers read files.
        let mut demoted: Vec<&(Box<str>, FirstSeen, Shape)> = Vec::new();
        let mut reason = String::new();
        if self.overflowed {
            let (keep, out): (Vec<_>, Vec<_>) = attrs.into_iter().partition(|a| present(&a.2) == self.items);
            attrs = keep;
            demoted = out;
            reason = format!(
                "the entity has more than {MAX_TRACKED_ATTRIBUTES} distinct attribute names: only attributes every item has are columns"
            );
        } else if attrs.len() > MAX_COLUMNS {
            let floor = self.items.saturating_mul(MIN_SHARE_PERCENT).div_ceil(100).max(1);
            attrs.sort_by(|a, b| present(&b.2).cmp(&present(&a.2)).then_with(|| a.1.cmp(&b.1)));
            let cut = attrs.iter().take(MAX_COLUMNS).take_while(|a| present(&a.2) >= floor).count();
            demoted = attrs.split_off(cut);
            reason = format!(
                "the entity has {} distinct attribute names, more than {MAX_COLUMNS}: attributes in fewer than {MIN_SHARE_PERCENT}% of its items, and beyond the {MAX_COLUMNS} most frequent, are kept in the extra column",
                self.attrs.len()
            );
        }
        attrs.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        let mut columns: Vec<Column> = attrs
            .into_iter()
            .map(|(name, _, shape)| Column {
                name: name.to_string(),
                source: name.to_string(),
                ty: resolve(shape, table, name, widenings),
                nullable: true,
                seen: shape.seen(),
            })
            .collect();
        let demoted = if demoted.is_empty() && !self.overflowed {
            None
        } else {
            demoted.sort_by(|a, b| present(&b.2).cmp(&present(&a.2)).then_with(|| a.1.cmp(&b.1)));
            let label =
                format!("attributes kept out of the columns, as a DynamoDB JSON item; {ENCODING_PREFIX}dynamodb-json");
            columns.push(Column {
                name: EXTRA_COLUMN.to_owned(),
                source: EXTRA_COLUMN.to_owned(),
                ty: ColumnType::Utf8,
                nullable: true,
                seen: [(label, 0)].into(),
            });
            Some(Demoted {
                table: table.to_owned(),
                column: String::new(), // named once names are unique
                attributes: demoted.len() as u64,
                examples: demoted.iter().take(10).map(|a| a.0.to_string()).collect(),
                reason,
            })
        };
        let mut renamed = unique_names(table, &mut columns);
        let extra = demoted.as_ref().and_then(|_| columns.last()).map(|c| c.name.clone());
        // The extra column is not an attribute: its name is reported with what it holds.
        renamed.retain(|r| Some(&r.column) != extra.as_ref());
        let demoted = demoted.map(|mut d| {
            d.column = extra.clone().unwrap_or_default();
            d
        });
        InferredSchema {
            schema: TableSchema { table: table.to_owned(), entity: entity.map(str::to_owned), columns, extra },
            demoted,
            renamed,
        }
    }
}

/// Makes column names unique without regard to case: the first keeps its name, later ones get
/// the lowest free suffix `_2`, `_3`, ... Returns the renamings.
fn unique_names(table: &str, columns: &mut [Column]) -> Vec<Renamed> {
    let mut taken: std::collections::HashSet<String> = std::collections::HashSet::with_capacity(columns.len());
    let mut renamed = Vec::new();
    // Names as they are reserve their lowercase form first, so a suffix never takes a name an
    // attribute has.
    let all: std::collections::HashSet<String> = columns.iter().map(|c| c.name.to_lowercase()).collect();
    for c in columns.iter_mut() {
        if taken.insert(c.name.to_lowercase()) {
            continue;
        }
        let mut n = 2;
        let name = loop {
            let candidate = format!("{}_{n}", c.name);
            let lower = candidate.to_lowercase();
            if !all.contains(&lower) && taken.insert(lower) {
                break candidate;
            }
            n += 1;
        };
        renamed.push(Renamed {
            table: table.to_owned(),
            attribute: c.source.clone(),
            column: name.clone(),
            reason: "another column has the same name without regard to case".into(),
        });
        c.name = name;
    }
    renamed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::json::put_line as decode_export_line;

    fn schema_of(lines: &[&str]) -> (TableSchema, Vec<Widening>) {
        let mut shape = EntityShape::default();
        for (i, l) in lines.iter().enumerate() {
            shape.observe(&decode_export_line(l), 0, i as u64 + 1);
        }
        let mut w = Vec::new();
        (shape.schema("t", Some("T"), &mut w).schema, w)
    }

    fn ty<'a>(s: &'a TableSchema, col: &str) -> &'a ColumnType {
        &s.columns.iter().find(|c| c.name == col).unwrap().ty
    }

    #[test]
    fn numbers_pick_the_narrowest_exact_type() {
        let (s, w) = schema_of(&[
            r#"{"Item":{"i":{"N":"1"},"d":{"N":"1"},"big":{"N":"99999999999999999999"},"txt":{"N":"1E-100"}}}"#,
            r#"{"Item":{"i":{"N":"-9223372036854775808"},"d":{"N":"2.50"},"big":{"N":"1"},"txt":{"N":"1"}}}"#,
        ]);
        assert_eq!(ty(&s, "i"), &ColumnType::Int64);
        assert_eq!(ty(&s, "d"), &ColumnType::Decimal { precision: 38, scale: 1 });
        assert_eq!(ty(&s, "big"), &ColumnType::Decimal { precision: 38, scale: 0 });
        assert_eq!(ty(&s, "txt"), &ColumnType::DecimalText);
        let cols: Vec<&str> = w.iter().map(|w| w.column.as_str()).collect();
        assert_eq!(cols, ["d", "big", "txt"]);
    }

    #[test]
    fn sets_lists_maps_and_mixed() {
        let (s, w) = schema_of(&[
            r#"{"Item":{"ss":{"SS":["a"]},"ns":{"NS":["1","2.5"]},"bs":{"BS":["AA=="]},"l":{"L":[{"S":"a"}]},"hl":{"L":[{"S":"a"},{"N":"1"}]},"m":{"M":{"a":{"S":"x"}}},"mix":{"S":"x"},"n":{"NULL":true}}}"#,
            r#"{"Item":{"l":{"L":[{"S":"b"},{"NULL":true}]},"m":{"M":{"b":{"N":"2"}}},"mix":{"N":"1"},"n":{"NULL":true}}}"#,
        ]);
        assert_eq!(ty(&s, "ss"), &ColumnType::List { element: Box::new(ColumnType::Utf8), set: Some(SetKind::SS) });
        assert_eq!(
            ty(&s, "ns"),
            &ColumnType::List {
                element: Box::new(ColumnType::Decimal { precision: 38, scale: 1 }),
                set: Some(SetKind::NS)
            }
        );
        assert_eq!(ty(&s, "bs"), &ColumnType::List { element: Box::new(ColumnType::Binary), set: Some(SetKind::BS) });
        assert_eq!(ty(&s, "l"), &ColumnType::List { element: Box::new(ColumnType::Utf8), set: None });
        assert_eq!(ty(&s, "hl"), &ColumnType::Json);
        assert!(
            matches!(ty(&s, "m"), ColumnType::Struct { fields } if fields.len() == 2 && fields[1].ty == ColumnType::Int64)
        );
        assert_eq!(ty(&s, "mix"), &ColumnType::Json);
        assert_eq!(ty(&s, "n"), &ColumnType::Null);
        assert!(w.iter().any(|w| w.column == "mix" && w.seen.len() == 2));
        assert!(w.iter().any(|w| w.column == "hl"));
        // Columns follow first appearance.
        assert_eq!(s.columns[0].name, "ss");
    }

    #[test]
    fn merging_is_order_independent() {
        let lines = [
            r#"{"Item":{"a":{"N":"1"},"m":{"M":{"x":{"S":"1"}}}}}"#,
            r#"{"Item":{"b":{"N":"1.25"},"a":{"N":"2.5"}}}"#,
            r#"{"Item":{"m":{"M":{"y":{"N":"3"}}},"c":{"SS":["z"]}}}"#,
        ];
        let items: Vec<_> = lines.iter().map(|l| decode_export_line(l)).collect();
        let mut one = EntityShape::default();
        for (i, it) in items.iter().enumerate() {
            one.observe(it, 0, i as u64);
        }
        let mut parts: Vec<EntityShape> = Vec::new();
        for (i, it) in items.iter().enumerate().rev() {
            let mut s = EntityShape::default();
            s.observe(it, 0, i as u64);
            parts.push(s);
        }
        let mut merged = EntityShape::default();
        for p in &parts {
            merged.merge(p);
        }
        let (mut w1, mut w2) = (Vec::new(), Vec::new());
        assert_eq!(one.schema("t", None, &mut w1).schema, merged.schema("t", None, &mut w2).schema);
        assert_eq!(w1, w2);
    }

    #[test]
    fn files_observed_out_of_order_give_the_columns_of_the_input_order() {
        // Pass one reads the largest files first: one worker may observe file 2 before file 0
        // and file 1. Columns must still follow where attributes first appear in the input.
        let files: [&[&str]; 3] = [
            &[r#"{"Item":{"c":{"S":"x"},"a":{"N":"1"}}}"#, r#"{"Item":{"d":{"S":"x"},"b":{"N":"1"}}}"#],
            &[r#"{"Item":{"b":{"N":"2"},"e":{"S":"y"}}}"#],
            &[r#"{"Item":{"a":{"N":"3"},"b":{"N":"3"},"e":{"S":"z"},"d":{"S":"z"}}}"#],
        ];
        let observe = |order: &[u32]| {
            let mut shape = EntityShape::default();
            for &f in order {
                for (i, l) in files[f as usize].iter().enumerate() {
                    shape.observe(&decode_export_line(l), f, i as u64 + 1);
                }
            }
            let columns = shape.schema("t", None, &mut Vec::new()).schema.columns;
            columns.into_iter().map(|c| c.name).collect::<Vec<_>>()
        };
        let in_order = observe(&[0, 1, 2]);
        assert_eq!(in_order, ["c", "a", "d", "b", "e"]);
        for order in [[2, 0, 1], [2, 1, 0], [1, 2, 0], [0, 2, 1]] {
            assert_eq!(observe(&order), in_order, "files observed in the order {order:?}");
        }
    }

    #[test]
    fn a_shape_read_back_merges_as_the_original() {
        let lines = [
            r#"{"Item":{"a":{"N":"1"},"m":{"M":{"x":{"S":"1"}}},"l":{"L":[{"N":"1.5"}]}}}"#,
            r#"{"Item":{"b":{"NS":["1.25","3"]},"a":{"N":"2.5"}}}"#,
        ];
        let mut shape = EntityShape::default();
        for (i, l) in lines.iter().enumerate() {
            shape.observe(&decode_export_line(l), 3, i as u64 + 1);
        }
        let back: EntityShape = serde_json::from_str(&serde_json::to_string(&shape).unwrap()).unwrap();
        assert_eq!(back.attrs, shape.attrs);
        // The name index is rebuilt: merging into the copy finds existing attributes.
        let mut more = EntityShape::default();
        more.observe(&decode_export_line(r#"{"Item":{"a":{"N":"7"}}}"#), 4, 1);
        let (mut x, mut y) = (shape.clone(), back);
        x.merge(&more);
        y.merge(&more);
        assert_eq!(x.attrs, y.attrs);
        assert_eq!(y.attrs.len(), 4);
        let (mut w1, mut w2) = (Vec::new(), Vec::new());
        assert_eq!(x.schema("t", None, &mut w1).schema, y.schema("t", None, &mut w2).schema);
    }

    #[test]
    fn unstable_maps_become_json() {
        let mut shape = EntityShape::default();
        for i in 0..(MAX_STRUCT_FIELDS + 1) {
            let line = format!(r#"{{"Item":{{"m":{{"M":{{"k{i}":{{"S":"v"}}}}}}}}}}"#);
            shape.observe(&decode_export_line(&line), 0, i as u64);
        }
        let mut w = Vec::new();
        let s = shape.schema("t", None, &mut w).schema;
        assert_eq!(s.columns[0].ty, ColumnType::Json);
    }

    #[test]
    fn names_differing_only_in_case_get_suffixes() {
        let (s, _) = schema_of(&[r#"{"Item":{"Price":{"N":"1.5"},"price":{"N":"2"},"PRICE_2":{"S":"x"}}}"#]);
        let names: Vec<(&str, &str)> = s.columns.iter().map(|c| (c.name.as_str(), c.source.as_str())).collect();
        // `price_2` is taken (without regard to case) by an attribute, so the suffix moves on.
        assert_eq!(names, vec![("Price", "Price"), ("price_3", "price"), ("PRICE_2", "PRICE_2")]);
        // A map whose field names differ only in case is kept as JSON.
        let (s, w) = schema_of(&[r#"{"Item":{"a":{"M":{"City":{"S":"x"},"city":{"S":"y"}}}}}"#]);
        assert_eq!(s.columns[0].ty, ColumnType::Json);
        assert!(w[0].reason.contains("differ only in case"), "{:?}", w);
    }

    #[test]
    fn many_rare_attributes_go_to_the_extra_column() {
        let mut shape = EntityShape::default();
        let n = MAX_COLUMNS + 500;
        for i in 0..n {
            let line =
                format!(r#"{{"Item":{{"PK":{{"S":"K#{i}"}},"common":{{"N":"{}"}},"stat#{i}":{{"N":"1"}}}}}}"#, i % 3);
            shape.observe(&decode_export_line(&line), 0, i as u64 + 1);
        }
        let mut w = Vec::new();
        let inferred = shape.schema("t", Some("T"), &mut w);
        let names: Vec<&str> = inferred.schema.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, vec!["PK", "common", EXTRA_COLUMN]);
        assert_eq!(inferred.schema.extra.as_deref(), Some(EXTRA_COLUMN));
        let d = inferred.demoted.unwrap();
        assert_eq!(d.attributes, n as u64);
        assert!(d.reason.contains("1%"), "{}", d.reason);
        // Under the cap every attribute stays a column, however rare.
        let (s, _) = schema_of(&[r#"{"Item":{"a":{"S":"x"}}}"#, r#"{"Item":{"b":{"S":"y"}}}"#]);
        assert_eq!(s.columns.len(), 2);
        assert!(s.extra.is_none());
    }

    #[test]
    fn tracking_is_bounded_and_the_choice_does_not_depend_on_order() {
        // Two workers each see a different half; merged either way, the same schema results.
        let line = |i: usize| format!(r#"{{"Item":{{"PK":{{"S":"K#{i}"}},"x{i}":{{"N":"1"}}}}}}"#);
        let half = MAX_TRACKED_ATTRIBUTES / 2 + 10;
        let mut a = EntityShape::default();
        let mut b = EntityShape::default();
        for i in 0..half {
            a.observe(&decode_export_line(&line(i)), 0, i as u64);
            b.observe(&decode_export_line(&line(half + i)), 1, i as u64);
        }
        let mut ab = a.clone();
        ab.merge(&b);
        let mut ba = b.clone();
        ba.merge(&a);
        let (mut w1, mut w2) = (Vec::new(), Vec::new());
        let s1 = ab.schema("t", None, &mut w1);
        let s2 = ba.schema("t", None, &mut w2);
        assert_eq!(s1.schema, s2.schema);
        let names: Vec<&str> = s1.schema.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, vec!["PK", EXTRA_COLUMN]);
        assert!(s1.demoted.unwrap().reason.contains("every item"), "only attributes every item has stay");
        // One worker alone stops tracking new names at the bound.
        let mut one = EntityShape::default();
        for i in 0..MAX_TRACKED_ATTRIBUTES + 5 {
            one.observe(&decode_export_line(&line(i)), 0, i as u64);
        }
        assert!(one.overflowed && one.attrs.len() == MAX_TRACKED_ATTRIBUTES);
    }
}
