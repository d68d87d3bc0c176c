//! How the rows of a mapped table are found again by the table keys of their items.
//!
//! An apply of incremental exports finds the rows of the keys it changed by their key columns. An
//! inferred table keeps each key attribute (`PK`, `SK`) as a column of its own; a mapped table
//! parses them into the key templates' columns (`USER#{email}` into `email`) and keeps no copy.
//! Its rows are still found exactly when those columns say the key back, one key to one row of
//! columns: [`KeyTemplate`] accepts a key only when its values render it back, and each
//! placeholder's column holds the value in its own type. The key's row of columns is its
//! *identity* in the table ([`Identity::row`]): the changed keys are looked for as rows of those
//! columns, as an inferred table's are as rows of `PK` and `SK`.
//!
//! Where the columns may not say the key back, there is no identity and the reason says why (the
//! apply then rewrites or replays the table, as it does for a table without key columns):
//!
//! - the entity keeps rows whose keys did not fit their template (`on_error = "null"`);
//! - a table key has no template in the entity, or its template has an optional part (a column
//!   of the absent part may take the attribute of the same name instead);
//! - a placeholder is `decimal` (kept as written in the key: `1.5` and `1.50` are two keys), or
//!   case-folded (`lower`/`upper`: the column holds the attribute's case, not the key's), or its
//!   column is declared in another type than the placeholder's own.
//!
//! A child table is found by its parent's identity when its `parent_columns` hold every column of
//! it; otherwise two parents could share the child rows' parent columns.
//!
//! [`KeyTemplate`]: crate::mapping::template::KeyTemplate

use std::collections::BTreeMap;

use crate::decode::{Item, Value, write_item_json};
use crate::mapping::template::{KeyTemplate, PlaceholderType};
use crate::mapping::{ColumnSource, DeclaredType, EntityMapping, Mapping};

/// The columns that say a mapped table's key back, and how a key becomes a row of them.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The identity columns, in the order the table keys name them.
    columns: Vec<(String, DeclaredType)>,
    /// Per table key attribute: its template and, per placeholder, the index of its column.
    keys: Vec<(String, KeyTemplate, Vec<usize>)>,
}

impl Identity {
    /// The identity of `entity`'s table, whose items' table keys are `key_names`;
    /// `Err(reason)` when its columns may not say the key back.
    pub fn of_entity(entity: &EntityMapping, key_names: &[String]) -> Result<Identity, String> {
        use crate::mapping::ErrorPolicy;
        let name = &entity.name;
        if entity.on_error != ErrorPolicy::Reject {
            return Err(format!(
                "entity `{name}` keeps the rows of keys that do not fit their template (`on_error = \"null\"`)"
            ));
        }
        if key_names.is_empty() {
            return Err(format!("the table keys of entity `{name}` are not known"));
        }
        let mut columns: Vec<(String, DeclaredType)> = Vec::new();
        let mut keys = Vec::with_capacity(key_names.len());
        for attribute in key_names {
            let Some(k) = entity.keys.iter().find(|k| &k.attribute == attribute) else {
                return Err(format!("table key `{attribute}` has no template in entity `{name}`"));
            };
            let template = &k.template;
            let mut at = Vec::with_capacity(template.placeholders().len());
            for p in template.placeholders() {
                if p.optional {
                    return Err(format!(
                        "the template of `{attribute}` in entity `{name}` (`{}`) has an optional part",
                        template.source()
                    ));
                }
                match p.ty {
                    PlaceholderType::Decimal => {
                        return Err(format!(
                            "`{{{}}}` in `{attribute}` of entity `{name}` is a `decimal` kept as written",
                            p.name
                        ));
                    }
                    PlaceholderType::Folded(_) => {
                        return Err(format!(
                            "`{{{}}}` in `{attribute}` of entity `{name}` is case-folded; its column keeps the attribute's case",
                            p.name
                        ));
                    }
                    _ => {}
                }
                let column = entity
                    .columns
                    .iter()
                    .find(|c| matches!(&c.source, ColumnSource::Key { placeholder, .. } if *placeholder == p.name));
                let Some(column) = column else {
                    return Err(format!("`{{{}}}` in `{attribute}` of entity `{name}` has no column", p.name));
                };
                let own = DeclaredType::of_placeholder(&p.ty);
                if column.ty != own {
                    return Err(format!(
                        "column `{}` of entity `{name}` is `{}`, not its placeholder's `{}`",
                        column.name,
                        column.ty.label(),
                        own.label()
                    ));
                }
                let i = match columns.iter().position(|(c, _)| *c == column.name) {
                    Some(i) => i,
                    None => {
                        columns.push((column.name.clone(), own));
                        columns.len() - 1
                    }
                };
                at.push(i);
            }
            keys.push((attribute.clone(), template.clone(), at));
        }
        if columns.is_empty() {
            return Err(format!("the table keys of entity `{name}` are constant"));
        }
        Ok(Identity { columns, keys })
    }

    /// The identity columns' names.
    pub fn columns(&self) -> Vec<String> {
        self.columns.iter().map(|(c, _)| c.clone()).collect()
    }

    /// The row of identity columns of the item whose table keys are `key` (a DynamoDB JSON
    /// object of them), as a DynamoDB JSON object of the columns; `None` when no row of the
    /// table can hold that key (a key that does not fit its template: its item was rejected).
    pub fn row<'k>(&self, key: &'k Item<'k>) -> Option<String> {
        let mut values: Vec<Option<Value<'k>>> = vec![None; self.columns.len()];
        for (attribute, template, at) in &self.keys {
            let text = key.iter().find_map(|(n, v)| match v {
                Value::S(s) if n == attribute => Some(s.as_ref()),
                _ => None,
            })?;
            let captured = template.captures(text).ok()?;
            for (value, &i) in captured.iter().zip(at) {
                let (_, ty) = self.columns.get(i)?;
                let v = super::apply::key_value(value.as_ref()?, ty).ok()?;
                match &values[i] {
                    // One placeholder in two keys: a key whose two values differ fits no row.
                    Some(held) if *held != v => return None,
                    _ => {}
                }
                values[i] = Some(v);
            }
        }
        let item: Item<'_> = self
            .columns
            .iter()
            .zip(values)
            .map(|((c, _), v)| v.map(|v| (std::borrow::Cow::Borrowed(c.as_str()), v)))
            .collect::<Option<_>>()?;
        let mut out = String::new();
        write_item_json(&item, &mut out);
        Some(out)
    }
}

/// The keys an apply changed, as each mapped table finds its rows: per table of `mapping`
/// (entities' tables and their child tables), the identity columns and, per changed key
/// (`keys`, DynamoDB JSON objects of the table keys `key_names`, in order), its row of them
/// (an empty string when no row of the table can hold the key); `Err(reason)` for a table
/// without an identity.
pub fn changed_keys(
    mapping: &Mapping,
    key_names: &[String],
    keys: &[String],
) -> BTreeMap<String, Result<IdentityKeys, String>> {
    let decoded: Vec<Option<Item<'_>>> = keys.iter().map(|k| crate::decode::json::decode_item_object(k).ok()).collect();
    let mut out = BTreeMap::new();
    for e in &mapping.entities {
        let found = Identity::of_entity(e, key_names).map(|id| IdentityKeys {
            columns: id.columns(),
            keys: decoded.iter().map(|k| k.as_ref().and_then(|k| id.row(k)).unwrap_or_default()).collect(),
        });
        for c in &e.children {
            let child = match &found {
                Ok(keys) => {
                    let missing: Vec<String> = keys
                        .columns
                        .iter()
                        .filter(|k| !c.parent_columns.contains(k))
                        .map(|k| format!("`{k}`"))
                        .collect();
                    if missing.is_empty() {
                        Ok(keys.clone())
                    } else {
                        Err(format!(
                            "its `parent_columns` lack {}, of the key columns of `{}`",
                            missing.join(", "),
                            e.table
                        ))
                    }
                }
                Err(reason) => Err(format!("its parent table `{}`: {reason}", e.table)),
            };
            out.insert(c.table.clone(), child);
        }
        out.insert(e.table.clone(), found);
    }
    out
}

/// A mapped table's changed keys as rows of its identity columns ([`changed_keys`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityKeys {
    pub columns: Vec<String>,
    /// One per changed key, in order: a DynamoDB JSON object of the columns, or empty.
    pub keys: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::parse_str;

    fn mapping(text: &str) -> Mapping {
        parse_str(std::path::Path::new("t.toml"), text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn ecommerce() -> Mapping {
        mapping(include_str!("../../mappings/ecommerce.toml"))
    }

    fn keys() -> Vec<String> {
        vec!["PK".into(), "SK".into()]
    }

    fn key(pk: &str, sk: &str) -> String {
        format!(r#"{{"PK":{{"S":"{pk}"}},"SK":{{"S":"{sk}"}}}}"#)
    }

    #[test]
    fn a_key_becomes_the_row_of_its_template_columns_in_their_types() {
        let m = ecommerce();
        let order = m.entities.iter().find(|e| e.name == "Order").unwrap();
        let id = Identity::of_entity(order, &keys()).unwrap();
        assert_eq!(id.columns(), ["user_email", "ordered_at", "order_id"]);
        let row = |pk, sk| {
            let json = key(pk, sk);
            id.row(&crate::decode::json::decode_item_object(&json).unwrap())
        };
        assert_eq!(
            row("USER#a@b.c", "ORDER#1750000000#ORD-1").as_deref(),
            Some(r#"{"user_email":{"S":"a@b.c"},"ordered_at":{"N":"1750000000"},"order_id":{"S":"ORD-1"}}"#)
        );
        // A key the template does not take (another entity's; a non-canonical number) is no row's.
        assert_eq!(row("PRODUCT#p1", "METADATA"), None);
        assert_eq!(row("USER#a@b.c", "ORDER#01750000000#ORD-1"), None);
        let users = m.entities.iter().find(|e| e.name == "User").unwrap();
        let id = Identity::of_entity(users, &keys()).unwrap();
        assert_eq!(id.columns(), ["email"], "a constant sort key adds no column");
    }

    #[test]
    fn every_table_of_a_mapping_gets_its_keys_or_the_reason_it_cannot() {
        let m = ecommerce();
        let changed = [key("USER#a@b.c", "PROFILE"), key("PRODUCT#p1", "METADATA"), "not json".into()];
        let by_table = changed_keys(&m, &keys(), &changed);
        let users = by_table["users"].as_ref().unwrap();
        assert_eq!(users.columns, ["email"]);
        assert_eq!(users.keys, [r#"{"email":{"S":"a@b.c"}}"#, "", ""], "one entry per changed key, in order");
        assert_eq!(by_table["products"].as_ref().unwrap().keys, ["", r#"{"sku":{"S":"p1"}}"#, ""]);
        assert_eq!(by_table["order_lines"], by_table["orders"], "a child finds its rows by its parent's key");
        let partial = include_str!("../../mappings/ecommerce.toml").replace(
            r#"parent_columns = ["order_id", "user_email", "ordered_at"]"#,
            r#"parent_columns = ["order_id", "user_email"]"#,
        );
        let by_table = changed_keys(&mapping(&partial), &keys(), &changed);
        let lines = by_table["order_lines"].as_ref().unwrap_err();
        assert_eq!(lines, "its `parent_columns` lack `ordered_at`, of the key columns of `orders`");
    }

    #[test]
    fn columns_that_may_not_say_the_key_back_are_reasons() {
        let entity = |keys: &str, extra: &str| {
            let text = format!(
                "[entity.T]\ntable = \"t\"\nkeys = {{ {keys} }}\n{extra}columns = [{{ name = \"v\", type = \"string\" }}]\n"
            );
            let m = mapping(&text);
            Identity::of_entity(&m.entities[0], &["PK".to_owned(), "SK".to_owned()]).map(|i| i.columns())
        };
        assert_eq!(entity(r#"PK = "T#{a}", SK = "S#{b:int}""#, ""), Ok(vec!["a".to_owned(), "b".to_owned()]));
        let reason = |keys: &str, extra: &str| entity(keys, extra).unwrap_err();
        assert!(reason(r#"PK = "T#{a}", SK = "S#{b:int}""#, "on_error = \"null\"\n").contains("on_error"));
        assert!(reason(r#"PK = "T#{a}""#, "").contains("table key `SK` has no template"));
        assert!(reason(r#"PK = "T#{a}", SK = "S#{b}[#L#{c:int}]""#, "").contains("optional part"));
        assert!(reason(r#"PK = "T#{a}", SK = "S#{b:decimal}""#, "").contains("`decimal` kept as written"));
        assert!(reason(r#"PK = "T#{a:lower}", SK = "S""#, "").contains("case-folded"));
        assert!(reason(r#"PK = "T", SK = "S""#, "").contains("constant"));
    }
}
