//! Property tests: random items written as export lines, unwound, read back.
//!
//! The generators reach what real tables hold: items without `Type` (or with a `Type` that is
//! not a string), several entities whose names need snake-casing, set members with spaces and
//! non-ASCII text, numbers across DynamoDB's whole range (1 to 38 digits, magnitudes 1E-130 to
//! 9.99E+125, negatives, exponent form, trailing zeros), nested lists and maps.
//!
//! `random_items_read_back_equal` (256 cases, shrinking) compares etl's output with expectations
//! built with etl's own decoder (`common::expected_rows`): it finds crashes and inconsistencies
//! quickly. `random_exports_match_the_oracle` gives 256 generated exports to the independent
//! oracle `tests/interop/unmapped.py` in one Python run, which computes every table, type and
//! cell from the source files with no etl code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value as Json, json};

use crate::common::*;
use crate::interop::python;

/// A DynamoDB number as a writer might spell it, with the key of its value (sign, significant
/// digits, exponent of the leading digit), so sets can keep members distinct by value.
fn number_with_key() -> impl Strategy<Value = ((bool, String, i32), String)> {
    // Half everyday magnitudes, half anywhere in DynamoDB's range.
    let everyday = ("[1-9][0-9]{0,11}", -4i32..19);
    let anywhere = ("[1-9][0-9]{0,37}", -130i32..=125);
    (any::<bool>(), prop_oneof![everyday, anywhere], 0usize..4).prop_map(|(neg, (digits, lead), style)| {
        let sig = digits.trim_end_matches('0').to_owned();
        let text = spell(neg, &digits, lead, style);
        ((neg, sig, lead), text)
    })
}

fn number() -> impl Strategy<Value = String> {
    number_with_key().prop_map(|(_, text)| text)
}

/// `digits` (no leading zero) with its first digit at 10^`lead`, in one of four spellings.
fn spell(neg: bool, digits: &str, lead: i32, style: usize) -> String {
    let sign = if neg { "-" } else { "" };
    let len = digits.len() as i32;
    let plain = || {
        let point = lead + 1;
        if point <= 0 {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        } else if point >= len {
            format!("{digits}{}", "0".repeat((point - len) as usize))
        } else {
            format!("{}.{}", &digits[..point as usize], &digits[point as usize..])
        }
    };
    match style {
        // 1.2345E+7
        0 if len > 1 => format!("{sign}{}.{}E{lead:+}", &digits[..1], &digits[1..]),
        0 => format!("{sign}{digits}E{lead}"),
        1 => format!("{sign}{}", plain()),
        // Trailing zeros after the point.
        2 => {
            let p = plain();
            if p.contains('.') { format!("{sign}{p}00") } else { format!("{sign}{p}.000") }
        }
        // An integer mantissa with trailing zeros and a shifted exponent: 12300E-5.
        _ => format!("{sign}{digits}00e{}", lead - len + 1 - 2),
    }
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn scalar() -> impl Strategy<Value = Json> {
    prop_oneof![
        "[a-zA-Z0-9 \"\\\\\n\té✓#]{0,12}".prop_map(|s| json!({ "S": s })),
        number().prop_map(|n| json!({ "N": n })),
        proptest::collection::vec(any::<u8>(), 0..12).prop_map(|b| json!({ "B": base64_encode(&b) })),
        any::<bool>().prop_map(|b| json!({ "BOOL": b })),
        Just(json!({ "NULL": true })),
        // Set members as tables hold them: words with spaces, punctuation, non-ASCII letters.
        proptest::collection::btree_set("[a-zA-Z0-9][a-zA-Z0-9 _#@.é✓-]{0,15}", 1..5).prop_map(|s| json!({ "SS": s })),
        // Members distinct by value (DynamoDB refuses a set holding 1 and 1.0).
        proptest::collection::vec(number_with_key(), 1..5).prop_map(|v| {
            let distinct: BTreeMap<(bool, String, i32), String> = v.into_iter().collect();
            json!({ "NS": distinct.into_values().collect::<Vec<_>>() })
        }),
        proptest::collection::btree_set(proptest::collection::vec(any::<u8>(), 1..16), 1..4)
            .prop_map(|s| json!({ "BS": s.iter().map(|b| base64_encode(b)).collect::<Vec<_>>() })),
    ]
}

fn value() -> impl Strategy<Value = Json> {
    scalar().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(|l| json!({ "L": l })),
            proptest::collection::btree_map("[a-c]", inner, 0..3).prop_map(|m| json!({ "M": m })),
        ]
    })
}

/// The type attribute: one of several entities, missing, or not a string.
fn type_value() -> impl Strategy<Value = Option<Json>> {
    prop_oneof![
        4 => prop_oneof![Just("Alpha"), Just("OrderItem"), Just("HTTPRequest"), Just("user-profile"), Just("9 lives")]
            .prop_map(|t| Some(json!({ "S": t }))),
        1 => Just(None),
        1 => Just(Some(json!({ "N": "7" }))),
    ]
}

fn item(i: usize) -> impl Strategy<Value = Json> {
    let names = prop_oneof![
        "[a-e]".boxed(),
        Just("created_at".to_owned()).boxed(),
        Just("Price".to_owned()).boxed(),
        Just("x y".to_owned()).boxed()
    ];
    (type_value(), proptest::collection::btree_map(names, value(), 0..6)).prop_map(move |(t, attrs)| {
        let mut m = serde_json::Map::new();
        m.insert("PK".into(), json!({ "S": format!("ID#{i}") }));
        if let Some(t) = t {
            m.insert("Type".into(), t);
        }
        for (k, v) in attrs {
            m.insert(k, v);
        }
        Json::Object(m)
    })
}

fn items() -> impl Strategy<Value = Vec<Json>> {
    (1usize..40).prop_flat_map(|n| (0..n).map(item).collect::<Vec<_>>())
}

/// The entity of an item as the README routes it: its `Type` when that is a string.
fn entity(item: &Json) -> Option<&str> {
    item.get("Type").and_then(|t| t.get("S")).and_then(Json::as_str)
}

/// Writes `items` as an export of up to three data files under `dir`; returns the export folder.
fn write_items(dir: &Path, items: &[Json]) -> PathBuf {
    let per_file = items.len().div_ceil(3).max(1);
    let mut files = Vec::new();
    let mut counts = Vec::new();
    for chunk in items.chunks(per_file) {
        let mut data = String::new();
        for it in chunk {
            data.push_str(&json!({ "Item": it }).to_string());
            data.push('\n');
        }
        files.push(gzip(data.as_bytes()));
        counts.push(chunk.len() as u64);
    }
    write_export(dir, &files, &counts)
}

/// Table name per entity (`None`: `_untyped`), from the run report.
fn tables_by_entity(out: &Path) -> BTreeMap<Option<String>, String> {
    run_report(out)["tables"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] != "_rejects")
        .map(|t| (t["entity"].as_str().map(str::to_owned), t["name"].as_str().unwrap().to_owned()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_items_read_back_equal(items in items()) {
        let tmp = tempfile::tempdir().unwrap();
        let export = write_items(tmp.path(), &items);
        let out = tmp.path().join("out");
        unwind(&[&export], &out, &["--threads", "2", "-q"], 0);
        prop_assert_eq!(count_rows(&out.join("_rejects")), 0);
        let mut groups: BTreeMap<Option<String>, Vec<Json>> = BTreeMap::new();
        for it in &items {
            groups.entry(entity(it).map(str::to_owned)).or_default().push(it.clone());
        }
        let tables = tables_by_entity(&out);
        prop_assert_eq!(tables.len(), groups.len());
        for (entity, group) in groups {
            let table = out.join(&tables[&entity]);
            let (schema, _) = read_table(&table);
            prop_assert_eq!(canonical_rows(&table), expected_rows(&group, &schema), "table {:?}", entity);
        }
    }
}

/// 256 exports drawn from the same generators (a fixed seed, so a failure replays), unwound with
/// two threads, then checked by the independent oracle in one Python run.
#[test]
fn random_exports_match_the_oracle() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let seed = [7u8; 32];
    let mut runner = TestRunner::new_with_rng(Config::with_cases(256), TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let strategy = items();
    let mut cases = Vec::new();
    let mut total = 0;
    for i in 0..256 {
        let items = strategy.new_tree(&mut runner).unwrap().current();
        total += items.len();
        let dir = tmp.path().join(format!("case{i:03}"));
        let export = write_items(&dir, &items);
        let out = dir.join("out");
        unwind(&[&export], &out, &["--threads", "2", "-q"], 0);
        cases.push((out, export));
    }
    let pairs: Vec<(&Path, &Path)> = cases.iter().map(|(o, e)| (o.as_path(), e.as_path())).collect();
    let reports = crate::unmapped::oracle(&py, &pairs, &[]);
    assert_eq!(reports.len(), 256);
    // Every item was routed to one table and compared there.
    let rows: u64 = reports
        .iter()
        .flat_map(|r| r["tables"].as_object().unwrap().values().map(|t| t["rows"].as_u64().unwrap()))
        .sum();
    assert_eq!(rows, total as u64);
    let cells: u64 = reports
        .iter()
        .flat_map(|r| r["tables"].as_object().unwrap().values().map(|t| t["cells"].as_u64().unwrap()))
        .sum();
    assert!(cells > 10 * total as u64, "{cells} cells for {total} items");
}
