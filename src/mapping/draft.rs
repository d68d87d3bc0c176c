//! `etl mapping infer`: a draft mapping file from the data.
//!
//! Three passes over the items, each a plain walk:
//!
//! 1. [`Discriminators`] counts the entity-discriminator conventions in use (`Type`, `type`,
//!    OneTable's `_type`, dynamodb-toolbox's `_et`, ElectroDB's `__edb_e__`, AppSync's
//!    `__typename`, `entity`) and picks the one covering most items.
//! 2. [`Drafter`] groups items by entity, infers every attribute's type from all items (the same
//!    rules as unwinding without a mapping) and keeps up to [`MAX_KEY_SAMPLES`] values of each
//!    key attribute, from which [`super::keyinfer`] proposes templates.
//! 3. [`Draft::verify`] matches every key of every item against its proposed template. A
//!    template that does not match every value is left out (the key stays an `_extra` value),
//!    so the draft loads and unwinding the same data with it rejects nothing.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::infer::EntityShape;
use super::keyinfer::{InferredTemplate, KeySample, infer_template};
use super::template::KeyTemplate;
use crate::decode::{Item, Value};
use crate::normalize::naming;
use crate::schema::{ColumnType, SetKind};

/// Discriminator conventions, in order of preference, with who uses them.
pub const DISCRIMINATORS: &[(&str, &str)] = &[
    ("Type", "single-table convention"),
    ("type", "single-table convention"),
    ("_type", "OneTable"),
    ("_et", "dynamodb-toolbox"),
    ("__edb_e__", "ElectroDB (with `__edb_v__`)"),
    ("__typename", "Amplify / AppSync"),
    ("entity", "convention"),
];

/// Key samples kept per entity and key attribute for clustering.
pub const MAX_KEY_SAMPLES: usize = 20_000;

/// Pass 1: which discriminator attributes the items carry.
#[derive(Debug, Default)]
pub struct Discriminators {
    pub items: u64,
    pub counts: BTreeMap<String, u64>,
}

impl Discriminators {
    pub fn observe(&mut self, item: &Item<'_>) {
        self.items += 1;
        for (name, _) in DISCRIMINATORS {
            if item.iter().any(|(k, v)| k == *name && matches!(v, Value::S(_))) {
                *self.counts.entry((*name).to_owned()).or_default() += 1;
            }
        }
    }

    /// The convention covering most items (earlier in [`DISCRIMINATORS`] on ties).
    pub fn choose(&self) -> Option<(&'static str, &'static str, u64)> {
        let mut best: Option<(&'static str, &'static str, u64)> = None;
        for (name, who) in DISCRIMINATORS {
            let n = self.counts.get(*name).copied().unwrap_or(0);
            if n > 0 && best.is_none_or(|b| n > b.2) {
                best = Some((name, who, n));
            }
        }
        best
    }
}

/// Whether an attribute name looks like a table or index key (`PK`, `SK`, `GSI1PK`,
/// `StatusIndexPK`, `pk`, `sk1`).
pub fn is_key_name(name: &str) -> bool {
    let trimmed = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if trimmed.ends_with("PK") || trimmed.ends_with("SK") {
        return true; // GSI1PK, StatusIndexPK
    }
    let l = trimmed.to_ascii_lowercase();
    let l = l.trim_start_matches("gsi").trim_start_matches("lsi").trim_start_matches(|c: char| c.is_ascii_digit());
    matches!(l, "pk" | "sk" | "hashkey" | "rangekey" | "partitionkey" | "sortkey")
}

#[derive(Debug, Default)]
struct KeySamples {
    samples: Vec<(String, Vec<(String, String)>)>,
    total: u64,
}

#[derive(Debug, Default)]
struct EntityDraft {
    shape: EntityShape,
    keys: BTreeMap<String, KeySamples>,
}

/// Pass 2: shapes and key samples per entity.
#[derive(Debug)]
pub struct Drafter {
    type_attribute: String,
    entities: BTreeMap<String, EntityDraft>,
    pub untyped: u64,
}

impl Drafter {
    pub fn new(type_attribute: &str) -> Drafter {
        Drafter { type_attribute: type_attribute.to_owned(), entities: BTreeMap::new(), untyped: 0 }
    }

    pub fn observe(&mut self, item: &Item<'_>, file: u32, line: u64) {
        let Some(Value::S(t)) = item.iter().find(|(k, _)| k == self.type_attribute.as_str()).map(|(_, v)| v) else {
            self.untyped += 1;
            return;
        };
        let e = self.entities.entry(t.to_string()).or_default();
        e.shape.observe(item, file, line);
        for (k, v) in item {
            let Value::S(key) = v else { continue };
            if !is_key_name(k) {
                continue;
            }
            let ks = e.keys.entry(k.to_string()).or_default();
            ks.total += 1;
            if ks.samples.len() < MAX_KEY_SAMPLES {
                let attrs = item
                    .iter()
                    .filter(|(n, _)| n != k && !is_key_name(n))
                    .filter_map(|(n, v)| match v {
                        Value::S(s) => Some((n.to_string(), s.to_string())),
                        Value::N(x) => Some((n.to_string(), x.as_str().to_owned())),
                        _ => None,
                    })
                    .collect();
                ks.samples.push((key.to_string(), attrs));
            }
        }
    }

    /// Proposes templates and column types.
    pub fn finish(self) -> Draft {
        let names: std::collections::BTreeSet<String> = self.entities.keys().cloned().collect();
        let tables = naming::assign(&names);
        let mut entities = Vec::new();
        for (name, e) in self.entities {
            let schema = e.shape.schema(&name, Some(&name), &mut Vec::new()).schema;
            // Attributes, not the extra column of an entity with very many names.
            let attributes: Vec<&crate::schema::Column> =
                schema.columns.iter().filter(|c| Some(&c.name) != schema.extra.as_ref()).collect();
            let attr_names: Vec<&str> = attributes.iter().map(|c| c.source.as_str()).collect();
            let mut keys = Vec::new();
            let mut taken: Vec<String> = Vec::new();
            // Table keys first (`PK`, then `SK`), then index keys by name.
            let mut order: Vec<(&String, &KeySamples)> = e.keys.iter().collect();
            order.sort_by_key(|(a, _)| (!a.eq_ignore_ascii_case("pk"), !a.eq_ignore_ascii_case("sk"), a.to_string()));
            for (attr, ks) in order {
                let pairs: Vec<Vec<(&str, &str)>> =
                    ks.samples.iter().map(|(_, a)| a.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect()).collect();
                let samples: Vec<KeySample<'_>> =
                    ks.samples.iter().zip(&pairs).map(|((key, _), attributes)| KeySample { key, attributes }).collect();
                let mut avoid: Vec<&str> = attr_names.clone();
                avoid.extend(taken.iter().map(String::as_str));
                if let Some(t) = infer_template(attr, &samples, &avoid)
                    && KeyTemplate::parse(&t.template).is_ok()
                {
                    for p in &t.placeholders {
                        if p.equals_attribute.as_deref() != Some(p.name.as_str()) {
                            taken.push(p.name.clone());
                        }
                    }
                    keys.push(DraftKey { attribute: attr.clone(), inferred: t, total: ks.total, matched_all: 0 });
                }
            }
            let columns = attributes
                .iter()
                .filter(|c| c.source != self.type_attribute && !e.keys.contains_key(&c.source))
                .map(|c| {
                    let present: u64 = c.seen.iter().filter(|(k, _)| *k != "NULL").map(|(_, n)| n).sum();
                    DraftColumn { name: c.source.clone(), ty: declared(&c.ty), required: present == e.shape.items }
                })
                .collect();
            let table = tables.get(&name).cloned().unwrap_or_else(|| naming::snake_case(&name));
            entities.push(DraftEntity { name, table, items: e.shape.items, keys, columns });
        }
        Draft { type_attribute: self.type_attribute, entities, untyped: self.untyped }
    }
}

/// A proposed key template and how it did on every item.
#[derive(Debug)]
pub struct DraftKey {
    pub attribute: String,
    pub inferred: InferredTemplate,
    /// Items of the entity that have this key.
    pub total: u64,
    /// Of those, how many the template matched in the full pass.
    pub matched_all: u64,
}

#[derive(Debug)]
pub struct DraftColumn {
    pub name: String,
    /// The type as written in a mapping file.
    pub ty: String,
    pub required: bool,
}

#[derive(Debug)]
pub struct DraftEntity {
    pub name: String,
    pub table: String,
    pub items: u64,
    pub keys: Vec<DraftKey>,
    pub columns: Vec<DraftColumn>,
}

/// A draft mapping.
#[derive(Debug)]
pub struct Draft {
    pub type_attribute: String,
    pub entities: Vec<DraftEntity>,
    pub untyped: u64,
}

/// A type as written in a mapping file.
fn declared(ty: &ColumnType) -> String {
    match ty {
        ColumnType::Int64 => "int64".into(),
        ColumnType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
        ColumnType::DecimalText => "decimal".into(),
        ColumnType::Utf8 => "string".into(),
        ColumnType::Binary => "binary".into(),
        ColumnType::Bool => "bool".into(),
        ColumnType::Json | ColumnType::Null => "json".into(),
        ColumnType::List { element, set: Some(kind) } => match kind {
            SetKind::SS => "set<string>".into(),
            SetKind::BS => "set<binary>".into(),
            SetKind::NS => format!("set<{}>", declared(element)),
        },
        ColumnType::List { element, set: None } => format!("list<{}>", declared(element)),
        ColumnType::Struct { fields } => {
            let f: Vec<String> = fields
                .iter()
                .map(|f| {
                    let plain =
                        !f.name.is_empty() && f.name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-');
                    let n = if plain { f.name.clone() } else { format!("`{}`", f.name) };
                    format!("{n}: {}", declared(&f.ty))
                })
                .collect();
            format!("struct<{}>", f.join(", "))
        }
        ColumnType::Float64 => "float64".into(),
        ColumnType::Timestamp { .. } => "timestamp".into(),
        ColumnType::Date => "date".into(),
        ColumnType::Map { value } => format!("map<string, {}>", declared(value)),
    }
}

impl Draft {
    /// Pass 3: counts, for every key of every item, whether its template matches.
    pub fn verify(&mut self, item: &Item<'_>, templates: &[Vec<Option<KeyTemplate>>]) {
        let Some(Value::S(t)) = item.iter().find(|(k, _)| k == self.type_attribute.as_str()).map(|(_, v)| v) else {
            return;
        };
        let Ok(ei) = self.entities.binary_search_by(|e| e.name.as_str().cmp(t)) else { return };
        for (ki, key) in self.entities[ei].keys.iter_mut().enumerate() {
            let Some(Some(template)) = templates[ei].get(ki) else { continue };
            if let Some((_, Value::S(v))) = item.iter().find(|(k, _)| k == key.attribute.as_str())
                && template.captures(v).is_ok()
            {
                key.matched_all += 1;
            }
        }
    }

    /// The compiled templates, per entity and key, for [`Draft::verify`].
    pub fn templates(&self) -> Vec<Vec<Option<KeyTemplate>>> {
        self.entities
            .iter()
            .map(|e| e.keys.iter().map(|k| KeyTemplate::parse(&k.inferred.template).ok()).collect())
            .collect()
    }

    /// The mapping file text. Keys whose template did not match every value in the full pass
    /// are written as comments only.
    pub fn to_toml(&self, discriminator: &str, source_note: &str) -> String {
        let (q, key) = (super::toml_string, super::toml_key);
        let mut out = String::new();
        let _ = writeln!(out, "# Draft mapping written by `etl mapping infer` from {source_note}.");
        let _ = writeln!(out, "# {discriminator}");
        if self.untyped > 0 {
            let _ = writeln!(
                out,
                "# {} items have no `{}` attribute: they go to `_untyped`, as without a mapping.",
                self.untyped, self.type_attribute
            );
        }
        let _ = writeln!(out, "# Review the types and templates, then check it with `etl mapping check`.\n");
        let _ = writeln!(
            out,
            "[settings]\ntype_attribute = {}\nunmapped = \"extra\"\non_error = \"reject\"\nunmatched = \"infer\"",
            q(&self.type_attribute)
        );
        for e in &self.entities {
            let _ = writeln!(out, "\n# {} items", e.items);
            let _ = writeln!(out, "[entity.{}]", key(&e.name));
            let _ = writeln!(out, "table = {}", q(&e.table));
            let mut keys = Vec::new();
            let mut key_columns: Vec<&str> = Vec::new();
            for k in &e.keys {
                let share = if k.total == 0 { 0.0 } else { 100.0 * k.matched_all as f64 / k.total as f64 };
                let full = k.matched_all == k.total;
                let _ = writeln!(
                    out,
                    "# {}: {} matched {}/{} values ({share:.1}%){}",
                    k.attribute,
                    k.inferred.template,
                    k.matched_all,
                    k.total,
                    if full { "" } else { "; left out: not every value matches" }
                );
                if full {
                    keys.push(format!("{} = {}", key(&k.attribute), q(&k.inferred.template)));
                    key_columns.extend(k.inferred.placeholders.iter().map(|p| p.name.as_str()));
                }
            }
            if !keys.is_empty() {
                let _ = writeln!(out, "keys = {{ {} }}", keys.join(", "));
            }
            let _ = writeln!(out, "columns = [");
            for c in &e.columns {
                if key_columns.contains(&c.name.as_str()) {
                    continue; // the key's placeholder fills it; the attribute must agree
                }
                let _ = write!(out, "  {{ name = {}, type = {}", q(&c.name), q(&c.ty));
                if c.ty == "timestamp" {
                    let _ = write!(out, ", format = \"epoch_s\"");
                }
                if c.required {
                    let _ = write!(out, ", required = true");
                }
                let _ = writeln!(out, " }},");
            }
            let _ = writeln!(out, "]");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names() {
        for k in ["PK", "SK", "pk", "sk1", "GSI1PK", "GSI1SK", "StatusIndexPK", "gsi2sk"] {
            assert!(is_key_name(k), "{k}");
        }
        for k in ["email", "Type", "skus", "desk_id", "pkg", "task", "disk"] {
            assert!(!is_key_name(k), "{k}");
        }
    }
}
