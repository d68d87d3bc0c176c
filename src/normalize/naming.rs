//! Table names from entity (type-attribute) values.

use std::collections::{BTreeMap, BTreeSet};

/// The table for items without the type attribute.
pub const UNTYPED_TABLE: &str = "_untyped";
/// The table of rejected lines and items.
pub const REJECTS_TABLE: &str = "_rejects";
/// The longest table name, in bytes. Names are folder names: a type value of any length still
/// gets a table, named by its start and a stable hash of the whole value.
pub const MAX_TABLE_NAME: usize = 96;
/// Hex digits of the hash that ends a shortened name.
const HASH_DIGITS: usize = 8;

/// `OrderItem` becomes `order_item`, `user-profile` becomes `user_profile`: lowercase ASCII
/// letters, digits and `_`, never starting with `_` (reserved for etl's own tables) or a digit.
pub fn snake_case(entity: &str) -> String {
    bounded(base_name(entity), entity)
}

/// Whether `entity`'s table name had to be shortened to [`MAX_TABLE_NAME`].
pub fn is_shortened(entity: &str) -> bool {
    base_name(entity).len() > MAX_TABLE_NAME
}

fn base_name(entity: &str) -> String {
    let mut out = String::with_capacity(entity.len() + 4);
    let chars: Vec<char> = entity.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_alphanumeric() {
            if c.is_ascii_uppercase() {
                let prev = i.checked_sub(1).map(|j| chars[j]);
                let next = chars.get(i + 1).copied();
                let boundary = match prev {
                    Some(p) if p.is_ascii_lowercase() || p.is_ascii_digit() => true,
                    Some(p) if p.is_ascii_uppercase() => next.is_some_and(|n| n.is_ascii_lowercase()),
                    _ => false,
                };
                if boundary && !out.ends_with('_') {
                    out.push('_');
                }
            }
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    let trimmed = out.trim_matches('_').to_owned();
    if trimmed.is_empty() {
        return "t_entity".into();
    }
    if trimmed.starts_with(|c: char| c.is_ascii_digit()) { format!("t_{trimmed}") } else { trimmed }
}

/// `name` if it fits [`MAX_TABLE_NAME`], else its start and the first hex digits of the MD5 of
/// the whole entity value (names are ASCII here, so bytes are characters).
fn bounded(name: String, entity: &str) -> String {
    if name.len() <= MAX_TABLE_NAME {
        return name;
    }
    use md5::Digest as _;
    let digest = md5::Md5::digest(entity.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let keep = name[..MAX_TABLE_NAME - HASH_DIGITS - 1].trim_end_matches('_');
    format!("{keep}_{}", &hex[..HASH_DIGITS])
}

/// Assigns each entity value a unique table name; collisions get `_2`, `_3`... in the order of
/// the sorted entity values, so names do not depend on the input order.
pub fn assign(entities: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut used: BTreeSet<String> = BTreeSet::new();
    let mut out = BTreeMap::new();
    for e in entities {
        let base = snake_case(e);
        let mut name = base.clone();
        let mut n = 2;
        while !used.insert(name.clone()) {
            name = format!("{base}_{n}");
            n += 1;
        }
        out.insert(e.clone(), name);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for (e, want) in [
            ("User", "user"),
            ("OrderItem", "order_item"),
            ("HTTPRequest", "http_request"),
            ("user-profile", "user_profile"),
            ("_rejects", "rejects"),
            ("123abc", "t_123abc"),
            ("Ünïcode", "n_code"),
            ("", "t_entity"),
            ("order_item_v2", "order_item_v2"),
        ] {
            assert_eq!(snake_case(e), want, "{e}");
        }
        // A type value longer than any file name gets a bounded, stable name.
        let long = "VeryLongEntity".repeat(1000);
        let name = snake_case(&long);
        assert!(name.len() <= MAX_TABLE_NAME, "{}", name.len());
        assert!(name.starts_with("very_long_entity_very_long"), "{name}");
        assert_eq!(name, snake_case(&long));
        assert!(is_shortened(&long) && !is_shortened("OrderItem"));
        assert_ne!(name, snake_case(&format!("{long}x")));
        let set: BTreeSet<String> = ["Order", "order", "ORDER"].iter().map(|s| s.to_string()).collect();
        let got = assign(&set);
        assert_eq!(got["ORDER"], "order");
        assert_eq!(got["Order"], "order_2");
        assert_eq!(got["order"], "order_3");
    }
}
