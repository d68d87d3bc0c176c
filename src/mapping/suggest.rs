//! Did-you-mean hints: the nearest valid name to a misspelt one, and what to say about a field
//! written in the wrong place.
//!
//! One distance serves every hint of the mapping compiler and the key templates: `strsim`'s
//! optimal string alignment (Levenshtein with adjacent transpositions), over characters. No I/O.

use super::compile::ENTITY_FIELDS;

/// Edit distance between two names, with a swap of neighbours counting as one edit.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

pub(crate) fn backticked(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    quoted.join(", ")
}

/// The candidate nearest to `word`, if near enough to be a likely typo.
pub(crate) fn closest<'c>(word: &str, candidates: &[&'c str]) -> Option<&'c str> {
    let lower = word.to_lowercase();
    if lower.chars().count() > 64 {
        return None;
    }
    let (best, d) = candidates.iter().map(|c| (*c, distance(&lower, &c.to_lowercase()))).min_by_key(|(_, d)| *d)?;
    let len = lower.chars().count().min(best.chars().count());
    let limit = match len {
        0..=3 => 1,
        4..=8 => 2,
        _ => 3,
    };
    (d <= limit).then_some(best)
}

/// What to say about an unknown field: a likely typo, a field that belongs elsewhere, or the
/// valid fields.
pub(super) fn unknown_field_hint(key: &str, allowed: &[&str], context: &str) -> String {
    let elsewhere = match (context, key) {
        (_, "nullable") => Some("columns are nullable unless `required = true`"),
        ("an entity", "type") => Some("an entity takes its type values from `match`; column types go in `columns`"),
        ("an entity", "name") => Some("an entity's name is its key: `[entity.NAME]`"),
        ("an entity", "primary_key" | "pk" | "sk") => Some("key attributes and their templates go in `keys`"),
        ("a child table", "children") => Some("child tables cannot have child tables of their own"),
        ("a child table", "keys" | "drop" | "unmapped" | "on_error" | "match") => {
            Some("child tables follow their parent entity; set this on the entity")
        }
        ("the mapping's top level", "type_attribute" | "unmapped" | "on_error" | "unmatched") => {
            Some("file-wide settings go in `[settings]`")
        }
        ("the mapping's top level", f) if ENTITY_FIELDS.contains(&f) => {
            Some("entity fields go in an entity table such as `[entity.User]`")
        }
        ("the mapping's top level", "entities") => Some("entities are written `[entity.NAME]`"),
        _ => None,
    };
    if let Some(h) = elsewhere {
        return h.to_owned();
    }
    match closest(key, allowed) {
        Some(c) => format!("did you mean `{c}`?"),
        None => format!("valid fields are {}", backticked(allowed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        assert_eq!(closest("colums", ENTITY_FIELDS), Some("columns"));
        assert_eq!(closest("tabel", ENTITY_FIELDS), Some("table"));
        assert_eq!(closest("xyz", ENTITY_FIELDS), None);
        assert_eq!(distance("ab", "ba"), 1);
        assert_eq!(distance("", "abc"), 3);
        // Characters, not bytes.
        assert_eq!(distance("ü", "u"), 1);
    }
}
