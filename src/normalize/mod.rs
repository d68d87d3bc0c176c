//! Per item: from a decoded [`Record`] to the rows of the tables it belongs in, or a reject.
//!
//! The [`Normalizer`] routes each item to its table (by the type attribute, a mapping entity's
//! `match` or `key_prefix`, or `_untyped`), applies a mapping ([`apply`]: keys parsed into typed
//! columns, coercion, child rows, `_extra`), and says why an item is rejected with a code from
//! the one table of reasons ([`reject::RejectReason`]). [`builder`] turns rows into Arrow
//! batches once a table's schema is known, and [`naming`] gives entities their table names.
//!
//! Everything here knows DynamoDB items and nothing of where bytes came from or go: the
//! central contract of the crate, a [`TableId`] with its rows (later its `RecordBatch`es), is
//! what this module hands to the pipeline.

pub mod apply;
pub mod builder;
pub mod identity;
pub mod naming;
pub mod reject;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use builder::{BatchBuilder, NormalizeError, Slot};
pub use reject::{RejectReason, RejectRow, RejectsBuilder, rejects_schema};

use crate::decode::{DecodeError, Item, Record, Value};
use crate::mapping::{Mapping, UnmatchedPolicy};
use crate::schema::TableSchema;

/// Which output table a row belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TableId {
    /// A table a mapping declares, by index into [`MappedTables::tables`].
    Mapped(u32),
    /// An inferred table, by the items' type value.
    Entity(Arc<str>),
    /// Items without the type attribute.
    Untyped,
    /// `_rejects`.
    Rejects,
}

/// The tables a mapping declares: each entity's table, then its child tables.
#[derive(Debug, Clone)]
pub struct MappedTables {
    pub tables: Vec<TableSchema>,
    /// Per table: the parent table's name for child tables.
    pub child_of: Vec<Option<String>>,
    /// Per entity: its table's index, and its children's indexes.
    pub entity_table: Vec<(u32, Vec<u32>)>,
}

impl MappedTables {
    pub fn new(m: &Mapping) -> MappedTables {
        let mut out = MappedTables { tables: Vec::new(), child_of: Vec::new(), entity_table: Vec::new() };
        for e in &m.entities {
            let t = out.tables.len() as u32;
            out.tables.push(apply::entity_schema(e));
            out.child_of.push(None);
            let mut children = Vec::new();
            for c in &e.children {
                children.push(out.tables.len() as u32);
                out.tables.push(apply::child_schema(e, c));
                out.child_of.push(Some(e.table.clone()));
            }
            out.entity_table.push((t, children));
        }
        out
    }
}

/// What one mapping entity saw, for the run report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntityStats {
    pub items: u64,
    pub rows: u64,
    pub rejected: u64,
    /// Failures by kind (`key_template`, `coercion`, ...), rejected or nulled.
    pub failures: BTreeMap<&'static str, u64>,
    pub nulled: u64,
    pub unmapped: BTreeMap<String, u64>,
    pub child_rows: u64,
}

impl EntityStats {
    pub fn merge(&mut self, o: &EntityStats) {
        self.items += o.items;
        self.rows += o.rows;
        self.rejected += o.rejected;
        self.nulled += o.nulled;
        self.child_rows += o.child_rows;
        for (k, n) in &o.failures {
            *self.failures.entry(k).or_default() += n;
        }
        for (k, n) in &o.unmapped {
            *self.unmapped.entry(k.clone()).or_default() += n;
        }
    }
}

/// Why an item is rejected, decided while normalizing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    pub reason: RejectReason,
    /// Attribute path at fault, empty when the whole item is.
    pub attribute: String,
    pub message: String,
    /// Byte offset of the problem within the unit of input, when known.
    pub offset: usize,
}

impl From<&DecodeError> for Reject {
    fn from(e: &DecodeError) -> Self {
        Reject { reason: e.reason.into(), attribute: e.attribute.clone(), message: e.message.clone(), offset: e.offset }
    }
}

/// The reject for a change record in a run that reads items only.
pub fn change_not_applied() -> Reject {
    Reject {
        reason: RejectReason::IncrementalRecord,
        attribute: String::new(),
        message: "an incremental export's change record, where items were expected".into(),
        offset: 0,
    }
}

/// Where one record's rows go.
#[derive(Debug)]
pub enum Normalized<'r, 'a> {
    /// An item for an inferred table: the table of its type value, or `_untyped` (`None`).
    /// The row is the item itself.
    Inferred {
        entity: Option<&'r str>,
        item: &'r Item<'a>,
    },
    /// A mapped entity's rows: its table's row first, then child rows, each with its table.
    Mapped {
        rows: Vec<(u32, Item<'r>)>,
    },
    Rejected(Reject),
}

/// The per-item stage. One per worker; its [`EntityStats`] are merged at the end.
pub struct Normalizer<'m> {
    type_attribute: &'m str,
    mapping: Option<(&'m Mapping, &'m MappedTables)>,
    /// Per mapping entity, in mapping order.
    pub entity_stats: Vec<EntityStats>,
}

impl<'m> Normalizer<'m> {
    pub fn new(type_attribute: &'m str, mapping: Option<(&'m Mapping, &'m MappedTables)>) -> Self {
        let entity_stats = mapping.map(|(m, _)| vec![EntityStats::default(); m.entities.len()]).unwrap_or_default();
        Normalizer { type_attribute, mapping, entity_stats }
    }

    /// Routes one record and, for a mapped entity, applies the mapping.
    pub fn normalize<'r, 'a>(&mut self, record: &'r Record<'a>) -> Normalized<'r, 'a>
    where
        'm: 'a,
    {
        match record {
            Record::Put(item) => self.put(item),
            Record::Change(_) => Normalized::Rejected(change_not_applied()),
        }
    }

    fn put<'r, 'a>(&mut self, item: &'r Item<'a>) -> Normalized<'r, 'a>
    where
        'm: 'a,
    {
        if let Some((mapping, tables)) = self.mapping {
            match apply::route(mapping, item) {
                apply::Route::Entity(ei) => return self.mapped(mapping, tables, ei, item),
                apply::Route::Unmatched(t) if mapping.unmatched == UnmatchedPolicy::Reject => {
                    return Normalized::Rejected(Reject {
                        reason: RejectReason::UnmatchedEntity,
                        attribute: mapping.type_attribute.clone(),
                        message: format!(
                            "no entity of the mapping matches `{}` = `{t}` (`unmatched = \"reject\"`)",
                            mapping.type_attribute
                        ),
                        offset: 0,
                    });
                }
                apply::Route::Unmatched(_) | apply::Route::NoType => {}
            }
        }
        let entity = item.iter().find(|(k, _)| k == self.type_attribute).and_then(|(_, v)| match v {
            Value::S(s) => Some(s.as_ref()),
            _ => None,
        });
        Normalized::Inferred { entity, item }
    }

    fn mapped<'r, 'a>(
        &mut self,
        mapping: &'m Mapping,
        tables: &'m MappedTables,
        ei: usize,
        item: &'r Item<'a>,
    ) -> Normalized<'r, 'a>
    where
        'm: 'a,
    {
        let e = &mapping.entities[ei];
        let st = &mut self.entity_stats[ei];
        st.items += 1;
        match apply::apply(e, item, &mapping.type_attribute) {
            Ok(applied) => {
                let (table, children) = &tables.entity_table[ei];
                st.rows += 1;
                st.child_rows += applied.children.len() as u64;
                st.nulled += applied.nulled.len() as u64;
                for f in &applied.nulled {
                    *st.failures.entry(f.kind.label()).or_default() += 1;
                }
                for a in applied.unmapped {
                    *st.unmapped.entry(a).or_default() += 1;
                }
                let mut rows = Vec::with_capacity(1 + applied.children.len());
                rows.push((*table, applied.row));
                rows.extend(applied.children.into_iter().map(|(ci, row)| (children[ci], row)));
                Normalized::Mapped { rows }
            }
            Err(f) => {
                st.rejected += 1;
                *st.failures.entry(f.kind.label()).or_default() += 1;
                Normalized::Rejected(Reject {
                    reason: f.kind.reason(),
                    attribute: f.attribute,
                    message: f.message,
                    offset: 0,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::json::put_line;

    #[test]
    fn routes_by_type_then_mapping_then_untyped() {
        let mut n = Normalizer::new("Type", None);
        let typed = Record::Put(put_line(r#"{"Item":{"PK":{"S":"a"},"Type":{"S":"User"}}}"#));
        assert!(matches!(n.normalize(&typed), Normalized::Inferred { entity: Some("User"), .. }));
        let untyped = Record::Put(put_line(r#"{"Item":{"PK":{"S":"a"},"Type":{"N":"1"}}}"#));
        assert!(matches!(n.normalize(&untyped), Normalized::Inferred { entity: None, .. }));

        let m = crate::mapping::parse_str(
            std::path::Path::new("m.toml"),
            "[settings]\nunmatched = \"reject\"\n[entity.User]\ntable = \"users\"\nkeys = { PK = \"USER#{id}\" }\n",
        )
        .unwrap();
        let tables = MappedTables::new(&m);
        let mut n = Normalizer::new("Type", Some((&m, &tables)));
        let user = Record::Put(put_line(r#"{"Item":{"PK":{"S":"USER#7"},"Type":{"S":"User"}}}"#));
        let Normalized::Mapped { rows } = n.normalize(&user) else { panic!("not mapped") };
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].0, 0);
        assert_eq!(rows[0].1[0].0, "id");
        let bad = Record::Put(put_line(r#"{"Item":{"PK":{"S":"ORDER#7"},"Type":{"S":"User"}}}"#));
        let Normalized::Rejected(r) = n.normalize(&bad) else { panic!("not rejected") };
        assert_eq!((r.reason, r.attribute.as_str()), (RejectReason::KeyTemplate, "PK"));
        let other = Record::Put(put_line(r#"{"Item":{"PK":{"S":"X"},"Type":{"S":"Other"}}}"#));
        let Normalized::Rejected(r) = n.normalize(&other) else { panic!("not rejected") };
        assert_eq!(r.reason, RejectReason::UnmatchedEntity);
        assert_eq!(n.entity_stats[0].items, 2);
        assert_eq!(n.entity_stats[0].rejected, 1);
        assert_eq!(n.entity_stats[0].failures.get("key_template"), Some(&1));
    }
}
