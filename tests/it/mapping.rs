//! Mapping files end to end: `mappings/ecommerce.toml` on the sample export, `etl mapping infer`
//! and `etl mapping check`, and what happens to items that do not fit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, TimeUnit, TimestampMillisecondType};

use crate::common::*;

fn ecommerce() -> std::path::PathBuf {
    root().join("mappings/ecommerce.toml")
}

fn column_names(dir: &Path) -> Vec<String> {
    read_table(dir).0.fields().iter().map(|f| f.name().clone()).collect()
}

/// Values of one string column, in row order.
fn strings(dir: &Path, column: &str) -> Vec<Option<String>> {
    let (schema, batches) = read_table(dir);
    let i = schema.index_of(column).unwrap();
    let mut out = Vec::new();
    for b in &batches {
        let a = b.column(i).as_string::<i32>();
        for r in 0..a.len() {
            out.push(a.is_valid(r).then(|| a.value(r).to_owned()));
        }
    }
    out
}

#[test]
fn ecommerce_mapping_gives_typed_joinable_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let ecommerce = ecommerce();
    let run = unwind(&[&sample_export()], &out, &["--mapping", ecommerce.to_str().unwrap()], 0);
    assert!(run.stderr.contains("every item accounted for"), "{}", run.stderr);
    let items = export_items(&sample_export());
    let groups = by_type(&items);

    // Tables, column names and order exactly as the mapping declares them.
    assert_eq!(
        column_names(&out.join("orders")),
        [
            "order_id",
            "user_email",
            "ordered_at",
            "status",
            "currency",
            "total",
            "item_count",
            "shipping",
            "gift",
            "coupon_codes",
            "tax_rate",
            "_extra"
        ]
    );
    assert_eq!(
        column_names(&out.join("order_lines")),
        ["order_id", "user_email", "ordered_at", "line_no", "sku", "qty", "unit_price", "_extra"]
    );
    assert!(strings(&out.join("order_lines"), "_extra").iter().all(Option::is_none), "every line field is mapped");
    assert_eq!(count_rows(&out.join("users")), groups["User"].len());
    assert_eq!(count_rows(&out.join("orders")), groups["Order"].len());
    assert_eq!(count_rows(&out.join("order_items")), groups["OrderItem"].len());
    assert_eq!(count_rows(&out.join("products")), groups["Product"].len());
    assert_eq!(count_rows(&out.join("reviews")), groups["Review"].len());
    assert_eq!(count_rows(&out.join("_rejects")), 0);
    let lines: usize = groups["Order"].iter().map(|o| o["lines"]["L"].as_array().unwrap().len()).sum();
    assert_eq!(count_rows(&out.join("order_lines")), lines);

    // `orders.ordered_at` is a UTC timestamp equal to the epoch in the sort key: declared in
    // seconds, written in milliseconds (Parquet has no seconds unit), the unit kept in metadata.
    let (schema, batches) = read_table(&out.join("orders"));
    let ordered_at = schema.field_with_name("ordered_at").unwrap();
    assert_eq!(ordered_at.data_type(), &DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())));
    assert!(ordered_at.metadata()["dynamodb.type"].ends_with("; unit=s"), "{:?}", ordered_at.metadata());
    assert_eq!(schema.field_with_name("total").unwrap().data_type(), &DataType::Decimal128(12, 2));
    let by_id: BTreeMap<&str, &serde_json::Value> =
        groups["Order"].iter().map(|o| (o["order_id"]["S"].as_str().unwrap(), o)).collect();
    let (id_col, at_col, email_col) = (
        schema.index_of("order_id").unwrap(),
        schema.index_of("ordered_at").unwrap(),
        schema.index_of("user_email").unwrap(),
    );
    let mut checked = 0;
    for b in &batches {
        let ids = b.column(id_col).as_string::<i32>();
        let at = b.column(at_col).as_primitive::<TimestampMillisecondType>();
        let emails = b.column(email_col).as_string::<i32>();
        for r in 0..b.num_rows() {
            let item = by_id[ids.value(r)];
            let sk = item["SK"]["S"].as_str().unwrap();
            let epoch: i64 = sk.split('#').nth(1).unwrap().parse().unwrap();
            assert_eq!(at.value(r), epoch * 1000, "{sk}");
            let pk = item["PK"]["S"].as_str().unwrap();
            assert_eq!(format!("USER#{}", emails.value(r)), pk);
            checked += 1;
        }
    }
    assert_eq!(checked, groups["Order"].len());

    // `orders.user_email` joins `users.email` for every order.
    let users: BTreeSet<String> = strings(&out.join("users"), "email").into_iter().flatten().collect();
    let emails = strings(&out.join("orders"), "user_email");
    assert!(emails.iter().all(|e| e.as_ref().is_some_and(|e| users.contains(e))));

    // The report lists each entity's counts.
    let report = run_report(&out);
    let entities = report["mapping"]["entities"].as_array().unwrap();
    assert_eq!(entities.len(), 5);
    for e in entities {
        assert_eq!(e["items"], e["rows"], "{e}");
        for k in ["rejected", "key_template_failures", "key_conflicts", "coercion_failures", "required_missing"] {
            assert_eq!(e[k], 0, "{k} in {e}");
        }
    }
    let order = entities.iter().find(|e| e["entity"] == "Order").unwrap();
    assert_eq!(order["child_rows"], lines);
    assert_eq!(report["reconciliation"]["rows_written"], items.len());

    // SQL sees the typed columns: a join on the parsed key column.
    let n = sql_csv(
        out.to_str().unwrap(),
        &[
            "select count(*) as n from orders o join users u on o.user_email = u.email where o.ordered_at >= timestamp '2000-01-01T00:00:00Z'",
        ],
    );
    assert_eq!(n, format!("n\n{}\n", groups["Order"].len()));
}

/// The draft for the sample export: a snapshot, it loads, it unwinds without rejects, and its
/// templates recover every template of `mappings/ecommerce.toml` (same literals and placeholder
/// types; names may differ).
#[test]
fn inferred_mapping_recovers_the_written_templates() {
    let r = etl(["mapping", "infer", sample_export().to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let draft = r.stdout.replace(&sample_export().display().to_string(), "<sample>");
    insta::assert_snapshot!("inferred_mapping_for_the_sample", draft);

    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("draft.toml");
    std::fs::write(&file, &r.stdout).unwrap();
    let out = tmp.path().join("out");
    unwind(&[&sample_export()], &out, &["--mapping", file.to_str().unwrap()], 0);
    assert_eq!(count_rows(&out.join("_rejects")), 0);
    let report = run_report(&out);
    assert!(report["mapping"]["entities"].as_array().unwrap().iter().all(|e| e["rejected"] == 0));

    let shape = |t: &str| -> String {
        // `{name:type}` -> `{:type}`, `{name}` -> `{:string}`.
        let mut out = String::new();
        let mut rest = t;
        while let Some(i) = rest.find('{') {
            out.push_str(&rest[..i]);
            let j = rest[i..].find('}').unwrap() + i;
            let inner = &rest[i + 1..j];
            out.push_str(&format!("{{:{}}}", inner.split_once(':').map_or("string", |(_, ty)| ty)));
            rest = &rest[j + 1..];
        }
        out.push_str(rest);
        out
    };
    let templates = |text: &str| -> BTreeSet<(String, String, String)> {
        let v: toml::Value = toml::from_str(text).unwrap();
        let mut out = BTreeSet::new();
        for (entity, e) in v["entity"].as_table().unwrap() {
            for (attr, t) in e.get("keys").and_then(|k| k.as_table()).into_iter().flatten() {
                out.insert((entity.clone(), attr.clone(), shape(t.as_str().unwrap())));
            }
        }
        out
    };
    let written = templates(&std::fs::read_to_string(ecommerce()).unwrap());
    let inferred = templates(&r.stdout);
    assert!(written.len() >= 11, "{written:?}");
    let missing: Vec<_> = written.difference(&inferred).collect();
    assert!(missing.is_empty(), "templates of ecommerce.toml not recovered: {missing:?}\ninferred: {inferred:?}");
}

fn bad_items_export(dir: &Path) -> std::path::PathBuf {
    let lines = [
        // Fits.
        r#"{"Item":{"PK":{"S":"USER#a@x.com"},"SK":{"S":"ORDER#1750000000#ORD-1"},"Type":{"S":"Order"},"order_id":{"S":"ORD-1"},"status":{"S":"new"},"currency":{"S":"EUR"},"total":{"N":"10.5"}}}"#,
        // The sort key's epoch is not a number.
        r#"{"Item":{"PK":{"S":"USER#a@x.com"},"SK":{"S":"ORDER#soon#ORD-2"},"Type":{"S":"Order"},"status":{"S":"new"},"currency":{"S":"EUR"},"total":{"N":"1"}}}"#,
        // Three decimals do not fit decimal(12,2).
        r#"{"Item":{"PK":{"S":"USER#a@x.com"},"SK":{"S":"ORDER#1750000001#ORD-3"},"Type":{"S":"Order"},"status":{"S":"new"},"currency":{"S":"EUR"},"total":{"N":"1.125"}}}"#,
        // The required `status` is missing.
        r#"{"Item":{"PK":{"S":"USER#a@x.com"},"SK":{"S":"ORDER#1750000002#ORD-4"},"Type":{"S":"Order"},"currency":{"S":"EUR"},"total":{"N":"2"}}}"#,
        // The attribute disagrees with the key.
        r#"{"Item":{"PK":{"S":"USER#a@x.com"},"SK":{"S":"ORDER#1750000003#ORD-5"},"Type":{"S":"Order"},"order_id":{"S":"ORD-6"},"status":{"S":"new"},"currency":{"S":"EUR"},"total":{"N":"3"}}}"#,
        // Unmapped attribute: kept in `_extra`.
        r#"{"Item":{"PK":{"S":"USER#a@x.com"},"SK":{"S":"ORDER#1750000004#ORD-7"},"Type":{"S":"Order"},"status":{"S":"new"},"currency":{"S":"EUR"},"total":{"N":"4"},"promo":{"S":"X1"}}}"#,
    ];
    let f = dir.join("items.json");
    std::fs::write(&f, lines.join("\n") + "\n").unwrap();
    f
}

const ORDERS_MAPPING: &str = r#"
[settings]
on_error = "ON_ERROR"

[entity.Order]
table = "orders"
keys = { PK = "USER#{user_email}", SK = "ORDER#{ordered_at:epoch_s}#{order_id}" }
columns = [
  { name = "status", type = "string", required = true },
  { name = "currency", type = "string" },
  { name = "total", type = "decimal(12,2)" },
]
"#;

#[test]
fn items_that_do_not_fit_are_rejected_with_entity_attribute_value_and_form() {
    let tmp = tempfile::tempdir().unwrap();
    let data = bad_items_export(tmp.path());
    let mapping = tmp.path().join("orders.toml");
    std::fs::write(&mapping, ORDERS_MAPPING.replace("ON_ERROR", "reject")).unwrap();
    let out = tmp.path().join("out");
    unwind(&[&data], &out, &["--mapping", mapping.to_str().unwrap()], 0);
    assert_eq!(count_rows(&out.join("orders")), 2);
    let reasons = strings(&out.join("_rejects"), "reason");
    let messages = strings(&out.join("_rejects"), "message");
    let attributes = strings(&out.join("_rejects"), "attribute");
    let raw = strings(&out.join("_rejects"), "raw");
    assert_eq!(
        reasons.iter().flatten().map(String::as_str).collect::<Vec<_>>(),
        ["key_template", "coercion", "required", "key_conflict"]
    );
    assert_eq!(
        attributes.iter().flatten().map(String::as_str).collect::<Vec<_>>(),
        ["SK", "total", "status", "order_id"]
    );
    let m: Vec<&str> = messages.iter().flatten().map(String::as_str).collect();
    assert!(m[0].contains("`Order`") && m[0].contains("ORDER#soon#ORD-2") && m[0].contains("epoch"), "{}", m[0]);
    assert!(m[1].contains("1.125") && m[1].contains("decimal(12,2)"), "{}", m[1]);
    assert!(m[2].contains("`status`"), "{}", m[2]);
    assert!(m[3].contains("ORD-6") && m[3].contains("ORD-5"), "{}", m[3]);
    assert!(raw[0].as_deref().is_some_and(|r| r.contains("ORDER#soon#ORD-2")), "the raw item is kept");
    let extra = strings(&out.join("orders"), "_extra");
    assert_eq!(extra, [None, Some(r#"{"promo":{"S":"X1"}}"#.to_owned())]);
    let report = run_report(&out);
    let e = &report["mapping"]["entities"][0];
    assert_eq!((e["items"].as_u64(), e["rows"].as_u64(), e["rejected"].as_u64()), (Some(6), Some(2), Some(4)));
    assert_eq!(e["key_template_failures"], 1);
    assert_eq!(e["unmapped_attributes"]["promo"], 1);
    assert_eq!(report["reconciliation"]["balanced"], true);

    // `mapping check` finds the same problems, names offending keys, and exits 1.
    let r = etl(["mapping", "check", "--mapping", mapping.to_str().unwrap(), data.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("SK=`ORDER#soon#ORD-2`"), "{}", r.stdout);
    assert!(r.stdout.contains("values do not fit their type at `total`"), "{}", r.stdout);
    assert!(r.stdout.contains("problems found"), "{}", r.stdout);
}

#[test]
fn on_error_null_keeps_the_row_and_counts_it() {
    let tmp = tempfile::tempdir().unwrap();
    let data = bad_items_export(tmp.path());
    let mapping = tmp.path().join("orders.toml");
    std::fs::write(&mapping, ORDERS_MAPPING.replace("ON_ERROR", "null")).unwrap();
    let out = tmp.path().join("out");
    unwind(&[&data], &out, &["--mapping", mapping.to_str().unwrap()], 0);
    // Only the missing required value still rejects.
    assert_eq!(strings(&out.join("_rejects"), "reason"), [Some("required".to_owned())]);
    assert_eq!(count_rows(&out.join("orders")), 5);
    let ids = strings(&out.join("orders"), "order_id");
    assert_eq!(ids[1], None, "the key that did not match leaves its columns null");
    let e = &run_report(&out)["mapping"]["entities"][0];
    assert_eq!(e["nulled_values"], 3, "{e}");
    assert_eq!(e["coercion_failures"], 1);
}

#[test]
fn broken_mappings_stop_the_run_with_every_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let broken = root().join("tests/mappings/broken/many_problems.toml");
    let out = tmp.path().join("out");
    let r = unwind(&[&sample_export()], &out, &["--mapping", broken.to_str().unwrap()], 2);
    assert!(r.stderr.contains("problems in the mapping; nothing was run"), "{}", r.stderr);
    assert!(r.stderr.matches("error: ").count() >= 5, "{}", r.stderr);
    assert!(r.stderr.contains("many_problems.toml:3:12"), "{}", r.stderr);
    assert!(!out.exists(), "nothing was written");
}

/// `mapping infer` and `mapping check` on a chain folder (a full export and incremental exports,
/// as `etl sample --incrementals` writes them) read the full export's items and the new image of
/// every change record, the items a chain run writes; deletes carry no item. None of it is an
/// invalid line.
#[test]
fn mapping_infer_and_check_read_a_chains_new_images_as_items() {
    use std::io::{BufRead as _, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let chain = tmp.path().join("chain");
    let c = chain.to_str().unwrap();
    let r = etl(["sample", "--out", c, "--users", "30", "--files", "2", "--seed", "7", "--incrementals", "2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut items = 0u64;
    let mut deletes = 0u64;
    for file in
        files_under(&chain.join("AWSDynamoDB")).into_iter().filter(|p| p.to_string_lossy().ends_with(".json.gz"))
    {
        let lines = BufReader::new(flate2::read::MultiGzDecoder::new(std::fs::File::open(&file).unwrap())).lines();
        for line in lines {
            let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            if v.get("Item").is_some() || v.get("NewImage").is_some() {
                items += 1;
            } else {
                assert!(v.get("Keys").is_some(), "{v}");
                deletes += 1;
            }
        }
    }
    assert!(deletes > 0, "the chain should hold deletes");
    // A draft inferred from the chain fits every item of it, change images included.
    let r = etl(["mapping", "infer", c]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains(&format!("on {items} of {items} items")), "{}", r.stdout);
    let draft = tmp.path().join("draft.toml");
    std::fs::write(&draft, &r.stdout).unwrap();
    let r = etl(["mapping", "check", "--mapping", draft.to_str().unwrap(), c]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("not valid items"), "{}", r.stdout);
    assert!(r.stdout.contains(&format!("\n{items} items checked: every item fits the mapping")), "{}", r.stdout);
}
