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
use crate::schema::{Column, ColumnType, DECIMAL_PRECISION, SetKind, StructField, TableSchema, Widening};

/// A map with more distinct field names than this over all items is kept as JSON text.
pub const MAX_STRUCT_FIELDS: usize = 64;

/// What numbers an attribute held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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

/// Where an attribute was first seen, to order columns as the data does.
pub type FirstSeen = (u32, u64, u32);

/// Shapes of every attribute of one entity.
#[derive(Debug, Clone, Default)]
pub struct EntityShape {
    pub items: u64,
    attrs: Vec<(Box<str>, FirstSeen, Shape)>,
    index: HashMap<Box<str>, usize>,
}

impl EntityShape {
    /// Records one item. `at` is (file index, line, position in item) of the item.
    pub fn observe(&mut self, item: &Item<'_>, file: u32, line: u64) {
        self.items += 1;
        for (pos, (name, value)) in item.iter().enumerate() {
            // Items of one entity usually list attributes in the same order: try that slot first.
            let slot = match self.attrs.get(pos) {
                Some((n, _, _)) if **n == **name => pos,
                _ => match self.index.get(name.as_ref()) {
                    Some(&i) => i,
                    None => {
                        let i = self.attrs.len();
                        let boxed: Box<str> = name.as_ref().into();
                        self.index.insert(boxed.clone(), i);
                        self.attrs.push((boxed, (file, line, pos as u32), Shape::default()));
                        i
                    }
                },
            };
            self.attrs[slot].2.observe(value);
        }
    }

    pub fn merge(&mut self, other: &EntityShape) {
        self.items += other.items;
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
    }

    /// The table schema: columns in the order attributes first appear in the input.
    pub fn schema(&self, table: &str, entity: Option<&str>, widenings: &mut Vec<Widening>) -> TableSchema {
        let mut attrs: Vec<&(Box<str>, FirstSeen, Shape)> = self.attrs.iter().collect();
        attrs.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        let columns = attrs
            .into_iter()
            .map(|(name, _, shape)| Column {
                name: name.to_string(),
                source: name.to_string(),
                ty: resolve(shape, table, name, widenings),
                nullable: true,
                seen: shape.seen(),
            })
            .collect();
        TableSchema { table: table.to_owned(), entity: entity.map(str::to_owned), columns }
    }
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
        (shape.schema("t", Some("T"), &mut w), w)
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
        assert_eq!(one.schema("t", None, &mut w1), merged.schema("t", None, &mut w2));
        assert_eq!(w1, w2);
    }

    #[test]
    fn unstable_maps_become_json() {
        let mut shape = EntityShape::default();
        for i in 0..(MAX_STRUCT_FIELDS + 1) {
            let line = format!(r#"{{"Item":{{"m":{{"M":{{"k{i}":{{"S":"v"}}}}}}}}}}"#);
            shape.observe(&decode_export_line(&line), 0, i as u64);
        }
        let mut w = Vec::new();
        let s = shape.schema("t", None, &mut w);
        assert_eq!(s.columns[0].ty, ColumnType::Json);
    }
}
