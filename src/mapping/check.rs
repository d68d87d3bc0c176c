//! `etl mapping check`: a mapping applied to every item without writing anything, with per
//! entity counts and a few offending keys for each problem.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{Mapping, UnmatchedPolicy};
use crate::decode::{Item, Value};
use crate::normalize::Reject;
use crate::normalize::apply::{self, Failure, FailureKind, Route};

/// Offending keys kept per problem.
pub const EXAMPLES: usize = 3;

/// One kind of problem at one attribute.
#[derive(Debug, Default, Clone)]
pub struct Problem {
    pub count: u64,
    pub examples: Vec<String>,
}

#[derive(Debug, Default, Clone)]
pub struct EntityCheck {
    pub items: u64,
    pub rows: u64,
    pub rejected: u64,
    /// By (failure kind, attribute).
    pub problems: BTreeMap<(FailureKind, String), Problem>,
    pub unmapped: BTreeMap<String, u64>,
    pub child_rows: u64,
}

/// Counts of a mapping against data.
#[derive(Debug)]
pub struct Checker<'m> {
    mapping: &'m Mapping,
    pub entities: Vec<EntityCheck>,
    pub unmatched: BTreeMap<String, Problem>,
    pub untyped: u64,
    pub decode_errors: Problem,
    pub items: u64,
}

impl<'m> Checker<'m> {
    pub fn new(mapping: &'m Mapping) -> Self {
        Checker {
            mapping,
            entities: vec![EntityCheck::default(); mapping.entities.len()],
            unmatched: BTreeMap::new(),
            untyped: 0,
            decode_errors: Problem::default(),
            items: 0,
        }
    }

    /// Counts one unit of input: an item, or the reject `etl unwind` would make of it.
    pub fn observe(&mut self, file: &str, line: u64, item: Result<&Item<'_>, &Reject>) {
        self.items += 1;
        let item = match item {
            Ok(i) => i,
            Err(e) => {
                note(&mut self.decode_errors, || format!("{file}:{line}: {} [{}]", e.message, e.reason.code()));
                return;
            }
        };
        let m = self.mapping;
        match apply::route(m, item) {
            Route::Entity(i) => {
                let keys = key_text(m, i, item);
                let c = &mut self.entities[i];
                c.items += 1;
                match apply::apply(&m.entities[i], item, &m.type_attribute) {
                    Ok(a) => {
                        c.rows += 1;
                        c.child_rows += a.children.len() as u64;
                        for f in &a.nulled {
                            record(c, f, file, line, &keys);
                        }
                        for u in a.unmapped {
                            *c.unmapped.entry(u).or_default() += 1;
                        }
                    }
                    Err(f) => {
                        c.rejected += 1;
                        record(c, &f, file, line, &keys);
                    }
                }
            }
            Route::Unmatched(t) => {
                let p = self.unmatched.entry(t.to_owned()).or_default();
                note(p, || format!("{file}:{line}"));
            }
            Route::NoType => self.untyped += 1,
        }
    }

    /// Whether anything failed: a reject, a value left null, a line that does not decode, or an
    /// unmatched type under `unmatched = "reject"`.
    pub fn failed(&self) -> bool {
        self.entities.iter().any(|e| !e.problems.is_empty())
            || self.decode_errors.count > 0
            || (self.mapping.unmatched == UnmatchedPolicy::Reject && !self.unmatched.is_empty())
    }

    /// The report, for a terminal.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let header = ["entity", "table", "items", "rows", "rejected", "key template", "coercion", "unmapped attrs"];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
        for (e, c) in self.mapping.entities.iter().zip(&self.entities) {
            let kind = |k: FailureKind| -> u64 {
                c.problems.iter().filter(|((kk, _), _)| *kk == k).map(|(_, p)| p.count).sum()
            };
            rows.push(vec![
                e.name.clone(),
                e.table.clone(),
                c.items.to_string(),
                c.rows.to_string(),
                c.rejected.to_string(),
                (kind(FailureKind::KeyTemplate) + kind(FailureKind::KeyConflict)).to_string(),
                (kind(FailureKind::Coercion) + kind(FailureKind::Required)).to_string(),
                c.unmapped.len().to_string(),
            ]);
        }
        let widths: Vec<usize> =
            (0..header.len()).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
        for (n, r) in rows.iter().enumerate() {
            let cells: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(i, c)| if i < 2 { format!("{c:<w$}", w = widths[i]) } else { format!("{c:>w$}", w = widths[i]) })
                .collect();
            let _ = writeln!(out, "{}", cells.join("  ").trim_end());
            if n == 0 {
                let _ = writeln!(out, "{}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
            }
        }
        for (e, c) in self.mapping.entities.iter().zip(&self.entities) {
            for ((kind, attr), p) in &c.problems {
                let _ = writeln!(out, "\n{}: {} {} at `{attr}`", e.name, p.count, kind_label(*kind));
                for ex in &p.examples {
                    let _ = writeln!(out, "  {ex}");
                }
            }
            if !c.unmapped.is_empty() {
                let list: Vec<String> = c.unmapped.iter().map(|(a, n)| format!("`{a}` ({n})")).collect();
                let _ = writeln!(out, "\n{}: attributes no column names: {}", e.name, list.join(", "));
            }
        }
        for (t, p) in &self.unmatched {
            let _ =
                writeln!(out, "\n{} items of type `{t}` match no entity (first at {})", p.count, p.examples.join(", "));
        }
        if self.untyped > 0 {
            let _ = writeln!(
                out,
                "\n{} items have no `{}` attribute and match no `key_prefix`",
                self.untyped, self.mapping.type_attribute
            );
        }
        if self.decode_errors.count > 0 {
            let _ = writeln!(out, "\n{} lines are not valid items:", self.decode_errors.count);
            for ex in &self.decode_errors.examples {
                let _ = writeln!(out, "  {ex}");
            }
        }
        let _ = writeln!(
            out,
            "\n{} items checked: {}",
            self.items,
            if self.failed() { "problems found" } else { "every item fits the mapping" }
        );
        out
    }
}

fn kind_label(k: FailureKind) -> &'static str {
    match k {
        FailureKind::KeyTemplate => "keys do not match their template",
        FailureKind::KeyConflict => "keys disagree",
        FailureKind::Coercion => "values do not fit their type",
        FailureKind::Required => "required values are missing",
        FailureKind::Unmapped => "attributes are not in the mapping",
    }
}

fn note(p: &mut Problem, example: impl FnOnce() -> String) {
    p.count += 1;
    if p.examples.len() < EXAMPLES {
        p.examples.push(example());
    }
}

fn record(c: &mut EntityCheck, f: &Failure, file: &str, line: u64, keys: &str) {
    let p = c.problems.entry((f.kind, f.attribute.clone())).or_default();
    note(p, || format!("{file}:{line} {keys}: {}", f.message));
}

/// `PK=… SK=…` of an item, for examples.
fn key_text(m: &Mapping, entity: usize, item: &Item<'_>) -> String {
    m.entities[entity]
        .keys
        .iter()
        .filter_map(|k| match item.iter().find(|(n, _)| n == k.attribute.as_str()).map(|(_, v)| v) {
            Some(Value::S(s)) => Some(format!("{}=`{s}`", k.attribute)),
            Some(Value::N(n)) => Some(format!("{}={}", k.attribute, n.as_str())),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}
