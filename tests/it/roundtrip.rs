//! Property test: random items written as export lines, unwound, read back equal.

use proptest::prelude::*;
use serde_json::{Value as Json, json};

use crate::common::*;

fn number() -> impl Strategy<Value = String> {
    (any::<bool>(), "[1-9][0-9]{0,37}", -40i32..40, 0usize..3).prop_map(|(neg, digits, exp, style)| {
        let sign = if neg { "-" } else { "" };
        match style {
            // Plain integer or decimal.
            0 => {
                let e = exp.clamp(-(digits.len() as i32) - 5, 0);
                if e == 0 {
                    format!("{sign}{digits}")
                } else {
                    let point = digits.len() as i32 + e;
                    if point > 0 {
                        format!("{sign}{}.{}", &digits[..point as usize], &digits[point as usize..])
                    } else {
                        format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
                    }
                }
            }
            // Exponent notation (moto keeps it; etl must canonicalise).
            1 => format!("{sign}{}.{}E{exp}", &digits[..1], &digits[1..]).replace(".E", "E"),
            // Trailing zeros.
            _ => format!("{sign}{digits}.000"),
        }
    })
}

fn scalar() -> impl Strategy<Value = Json> {
    prop_oneof![
        "[a-zA-Z0-9 \"\\\\\n\té✓]{0,12}".prop_map(|s| json!({ "S": s })),
        number().prop_map(|n| json!({ "N": n })),
        proptest::collection::vec(any::<u8>(), 0..12).prop_map(|b| json!({ "B": base64_encode(&b) })),
        any::<bool>().prop_map(|b| json!({ "BOOL": b })),
        Just(json!({ "NULL": true })),
        proptest::collection::btree_set("[a-z]{1,4}", 1..4).prop_map(|s| json!({ "SS": s })),
        proptest::collection::btree_set(0u32..1000, 1..4)
            .prop_map(|s| json!({ "NS": s.iter().map(|n| format!("{n}.5")).collect::<Vec<_>>() })),
        proptest::collection::btree_set(proptest::collection::vec(any::<u8>(), 1..4), 1..3)
            .prop_map(|s| json!({ "BS": s.iter().map(|b| base64_encode(b)).collect::<Vec<_>>() })),
    ]
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn value() -> impl Strategy<Value = Json> {
    scalar().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(|l| json!({ "L": l })),
            proptest::collection::btree_map("[a-c]", inner, 0..3).prop_map(|m| json!({ "M": m })),
        ]
    })
}

fn item(i: usize) -> impl Strategy<Value = Json> {
    (prop_oneof![Just("Alpha"), Just("Beta")], proptest::collection::btree_map("[a-e]", value(), 0..5)).prop_map(
        move |(t, attrs)| {
            let mut m = serde_json::Map::new();
            m.insert("PK".into(), json!({ "S": format!("ID#{i}") }));
            m.insert("Type".into(), json!({ "S": t }));
            for (k, v) in attrs {
                m.insert(k, v);
            }
            Json::Object(m)
        },
    )
}

fn items() -> impl Strategy<Value = Vec<Json>> {
    (1usize..30).prop_flat_map(|n| (0..n).map(item).collect::<Vec<_>>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_items_read_back_equal(items in items()) {
        let tmp = tempfile::tempdir().unwrap();
        let mut data = String::new();
        for it in &items {
            data.push_str(&json!({ "Item": it }).to_string());
            data.push('\n');
        }
        let dir = tmp.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("part.json.gz"), gzip(data.as_bytes())).unwrap();
        let out = tmp.path().join("out");
        unwind(&[&dir], &out, &["--threads", "2"], 0);
        prop_assert_eq!(count_rows(&out.join("_rejects")), 0);
        for (entity, group) in by_type(&items) {
            let table = out.join(entity.to_lowercase());
            let (schema, _) = read_table(&table);
            prop_assert_eq!(canonical_rows(&table), expected_rows(&group, &schema), "table {}", entity);
        }
    }
}
