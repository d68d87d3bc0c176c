//! Unmapped output against an oracle that shares no code with etl: `tests/interop/unmapped.py`
//! reads the source data files itself, applies the documented unwind rules (routing, table and
//! column names, type inference, cells) and compares every table, column type and cell with what
//! pyarrow and DuckDB read from etl's output. The types the oracle inferred come back here and are
//! held against types written by hand from the README, so the oracle's reading of the rules is
//! itself checked. Also here: the run report's `widenings` and `_etl/schema/<table>.json`.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::common::*;
use crate::interop::python;

/// Runs the oracle over `(output, source)` pairs; fails the test on any mismatch it reports.
/// Returns one report per pair: `{"items", "tables": {name: {"rows", "cells", "columns"}}}`.
pub fn oracle(py: &str, pairs: &[(&Path, &Path)], extra: &[&str]) -> Vec<Json> {
    let mut cmd = std::process::Command::new(py);
    cmd.arg(root().join("tests/interop/unmapped.py")).args(extra);
    for (out, source) in pairs {
        cmd.arg(out).arg(source);
    }
    let r = cmd.output().expect("run python");
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "unmapped.py found mismatches:\n{stderr}");
    let got: Json = serde_json::from_slice(&r.stdout).unwrap();
    got["outputs"].as_array().unwrap().clone()
}

/// One export line from attributes in the given order (`name`, DynamoDB JSON value).
fn line(attrs: &[(&str, &str)]) -> String {
    let body: Vec<String> = attrs.iter().map(|(k, v)| format!("{}:{v}", Json::String((*k).to_owned()))).collect();
    format!("{{\"Item\":{{{}}}}}", body.join(","))
}

/// An export of `files` (each a list of lines) in `dir`; returns the export folder.
fn export_of(dir: &Path, files: &[Vec<String>]) -> PathBuf {
    let data: Vec<Vec<u8>> = files.iter().map(|f| gzip((f.join("\n") + "\n").as_bytes())).collect();
    let counts: Vec<u64> = files.iter().map(|f| f.len() as u64).collect();
    write_export(dir, &data, &counts)
}

fn columns(report: &Json, table: &str) -> Vec<(String, String)> {
    report["tables"][table]["columns"]
        .as_array()
        .unwrap_or_else(|| panic!("no table `{table}` in {report}"))
        .iter()
        .map(|c| (c[0].as_str().unwrap().to_owned(), c[1].as_str().unwrap().to_owned()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

#[test]
fn the_sample_matches_the_oracle_cell_by_cell() {
    let Some(py) = python() else { return };
    let export = sample_export().join("AWSDynamoDB/01780310754114-ef51d439");
    let got = oracle(&py, &[(sample_out(), &export)], &[]);
    let r = &got[0];
    // Every item of the sample was compared: the five tables' rows add up to the items.
    let rows: u64 = ["user", "order", "order_item", "product", "review"]
        .iter()
        .map(|t| r["tables"][t]["rows"].as_u64().unwrap())
        .sum();
    assert_eq!(rows, r["items"].as_u64().unwrap());
    assert!(r["tables"]["order"]["cells"].as_u64().unwrap() > 2 * 700 * 15, "{r}");
    // Types of the sample's columns by the README's table, written out by hand.
    let order = columns(r, "order");
    for (c, t) in [
        ("total", "decimal(38,2)"),
        ("item_count", "int64"),
        ("ordered_at", "int64"),
        ("coupon_codes", "set<string>"),
        ("lines", "list<struct<qty:int64,sku:string,unit_price:decimal(38,2)>>"),
    ] {
        assert!(order.contains(&(c.to_owned(), t.to_owned())), "order.{c} is not {t}: {order:?}");
    }
    let product = columns(r, "product");
    for (c, t) in [("images", "set<binary>"), ("attributes", "json"), ("sizes", "set<int64>")] {
        assert!(product.contains(&(c.to_owned(), t.to_owned())), "product.{c} is not {t}: {product:?}");
    }
}

/// Hand-made items that hit each documented rule, in two data files. The oracle checks every
/// cell; the types it inferred are compared here with the README's table, rule by rule.
#[test]
fn every_inference_rule_matches_the_oracle() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let big38 = "12345678901234567890123456789012345678";
    let file1 = vec![
        line(&[
            ("PK", r#"{"S":"r1"}"#),
            ("Type", r#"{"S":"Rule"}"#),
            ("i", r#"{"N":"9223372036854775807"}"#),
            ("i_exp", r#"{"N":"1E+3"}"#),
            ("i_zero", r#"{"N":"-0.000"}"#),
            ("big", &format!(r#"{{"N":"{big38}"}}"#)),
            ("dec", r#"{"N":"1.50"}"#),
            ("dec_exp", r#"{"N":"-12.5e-3"}"#),
            ("frac38", r#"{"N":"0.12345678901234567890123456789012345678"}"#),
            ("txt", r#"{"N":"1E-130"}"#),
            ("s", r#"{"S":"é ✓ \"q\""}"#),
            ("b", r#"{"B":"AAEC/w=="}"#),
            ("t", r#"{"BOOL":true}"#),
            ("nul", r#"{"NULL":true}"#),
            ("ss", r#"{"SS":["b","a c"]}"#),
            ("ns", r#"{"NS":["1","2.25","-3E+2"]}"#),
            ("ns_int", r#"{"NS":["-9223372036854775808","7"]}"#),
            ("bs", r#"{"BS":["AA==","AQI="]}"#),
            ("l", r#"{"L":[{"S":"x"},{"NULL":true},{"S":"y"}]}"#),
            ("l_num", r#"{"L":[{"N":"1"},{"N":"2.5"}]}"#),
            ("l_mixed", r#"{"L":[{"S":"x"},{"N":"1"}]}"#),
            ("l_empty", r#"{"L":[]}"#),
            ("l_nested", r#"{"L":[{"L":[{"N":"1"}]},{"L":[]}]}"#),
            ("l_maps", r#"{"L":[{"M":{"a":{"N":"1"}}},{"M":{"b":{"S":"z"}}}]}"#),
            ("l_nulls", r#"{"L":[{"NULL":true}]}"#),
            ("m", r#"{"M":{"z":{"N":"1"},"a":{"S":"x"},"deep":{"M":{"k":{"BOOL":false}}}}}"#),
            ("m_mixed", r#"{"M":{"v":{"S":"x"}}}"#),
            ("m_empty", r#"{"M":{}}"#),
            ("m_case", r#"{"M":{"City":{"S":"x"}}}"#),
            ("mix", r#"{"S":"one"}"#),
            ("mix_null", r#"{"N":"1"}"#),
            ("Price", r#"{"N":"1"}"#),
        ]),
        line(&[("PK", r#"{"S":"u1"}"#), ("x", r#"{"S":"no type"}"#)]),
        line(&[("PK", r#"{"S":"u2"}"#), ("Type", r#"{"N":"7"}"#), ("x", r#"{"N":"1"}"#)]),
        line(&[("PK", r#"{"S":"o1"}"#), ("Type", r#"{"S":"Order"}"#)]),
        line(&[("PK", r#"{"S":"o2"}"#), ("Type", r#"{"S":"ORDER"}"#)]),
        line(&[("PK", r#"{"S":"h1"}"#), ("Type", r#"{"S":"HTTPRequest"}"#)]),
        line(&[("PK", r#"{"S":"d1"}"#), ("Type", r#"{"S":"9 lives"}"#)]),
    ];
    let file2 = vec![
        line(&[
            ("Type", r#"{"S":"Rule"}"#),
            ("PK", r#"{"S":"r2"}"#),
            // First seen in the second file: after every column of the first.
            ("late", r#"{"S":"l"}"#),
            ("i", r#"{"N":"-9223372036854775808"}"#),
            ("i_exp", r#"{"N":"12.000"}"#),
            ("i_zero", r#"{"NULL":true}"#),
            ("big", r#"{"N":"-1"}"#),
            // 37 integer digits and scale 1: 38 digits, the most decimal(38, s) holds.
            ("dec", r#"{"N":"-9999999999999999999999999999999999999.9"}"#),
            // 37 integer digits here and scale 2 in the next item: 39 digits, decimal text.
            ("dec39", r#"{"N":"1234567890123456789012345678901234567"}"#),
            ("dec_exp", r#"{"N":"3"}"#),
            ("frac38", r#"{"N":"-0.5"}"#),
            ("txt", r#"{"N":"9.9999999999999999999999999999999999999E+125"}"#),
            ("t", r#"{"BOOL":false}"#),
            ("nul", r#"{"NULL":true}"#),
            ("ns", r#"{"NS":["0.001"]}"#),
            ("l", r#"{"L":[]}"#),
            ("l_num", r#"{"L":[{"N":"-1E-2"}]}"#),
            ("l_mixed", r#"{"L":[{"BOOL":true}]}"#),
            ("l_empty", r#"{"L":[]}"#),
            ("l_maps", r#"{"L":[]}"#),
            ("m", r#"{"M":{"a":{"S":"y"}}}"#),
            ("m_mixed", r#"{"M":{"v":{"N":"2"},"w":{"NULL":true}}}"#),
            ("m_empty", r#"{"M":{}}"#),
            ("m_case", r#"{"M":{"city":{"S":"y"}}}"#),
            ("mix", r#"{"N":"1.50"}"#),
            ("mix_null", r#"{"NULL":true}"#),
            ("price", r#"{"N":"2.5"}"#),
        ]),
        line(&[
            ("PK", r#"{"S":"r3"}"#),
            ("Type", r#"{"S":"Rule"}"#),
            ("dec39", r#"{"N":"0.01"}"#),
            ("mix", r#"{"L":[{"SS":["s"]},{"NS":["1.0"]},{"BS":["AA=="]},{"M":{"k":{"NULL":true}}}]}"#),
            ("mix_null", r#"{"S":"x"}"#),
            ("m", r#"{"NULL":true}"#),
            ("PRICE_2", r#"{"S":"taken"}"#),
        ]),
        line(&[("PK", r#"{"S":"o3"}"#), ("Type", r#"{"S":"order"}"#)]),
    ];
    let export = export_of(tmp.path(), &[file1, file2]);
    let out = tmp.path().join("out");
    unwind(&[&export], &out, &[], 0);
    let got = oracle(&py, &[(&out, &export)], &[]);
    let r = &got[0];

    // Routing and table names: `Type` values that are not `S`, and missing ones, go to
    // `_untyped`; `Order`, `ORDER`, `order` share a name and get suffixes in sorted order.
    let mut tables: Vec<&str> = r["tables"].as_object().unwrap().keys().map(String::as_str).collect();
    tables.sort();
    assert_eq!(tables, ["_rejects", "_untyped", "http_request", "order", "order_2", "order_3", "rule", "t_9_lives"]);
    let rows = |t: &str| r["tables"][t]["rows"].as_u64().unwrap();
    assert_eq!((rows("rule"), rows("_untyped"), rows("order"), rows("order_2")), (3, 2, 1, 1));

    let want = pairs(&[
        ("PK", "string"),
        ("Type", "string"),
        ("i", "int64"),
        ("i_exp", "int64"),
        ("i_zero", "int64"),
        ("big", "decimal(38,0)"),
        ("dec", "decimal(38,1)"),
        ("dec_exp", "decimal(38,4)"),
        ("frac38", "decimal(38,38)"),
        ("txt", "dectext"),
        ("s", "string"),
        ("b", "binary"),
        ("t", "bool"),
        ("nul", "null"),
        ("ss", "set<string>"),
        ("ns", "set<decimal(38,3)>"),
        ("ns_int", "set<int64>"),
        ("bs", "set<binary>"),
        ("l", "list<string>"),
        ("l_num", "list<decimal(38,2)>"),
        ("l_mixed", "json"),
        ("l_empty", "json"),
        ("l_nested", "list<list<int64>>"),
        ("l_maps", "list<struct<a:int64,b:string>>"),
        ("l_nulls", "list<null>"),
        ("m", "struct<a:string,deep:struct<k:bool>,z:int64>"),
        ("m_mixed", "struct<v:json,w:null>"),
        ("m_empty", "json"),
        ("m_case", "json"),
        ("mix", "json"),
        ("mix_null", "json"),
        ("Price", "int64"),
        ("late", "string"),
        ("dec39", "dectext"),
        ("price_3", "decimal(38,1)"),
        ("PRICE_2", "string"),
    ]);
    assert_eq!(columns(r, "rule"), want);
    // A `Type` that is not an `S` is an ordinary attribute of `_untyped`.
    assert_eq!(columns(r, "_untyped"), pairs(&[("PK", "string"), ("x", "json"), ("Type", "int64")]));
}

/// `M` is a struct up to 64 distinct field names over all items, JSON text from the 65th: three
/// entities whose maps together name 63, 64 and 65 fields, each map holding a few of them.
#[test]
fn maps_keep_64_field_names_as_a_struct_and_become_json_at_65() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut lines = Vec::new();
    for (entity, names) in [("M63", 63), ("M64", 64), ("M65", 65)] {
        // Each item holds a window of 10 names; together they name `names` fields.
        for start in (0..names).step_by(7) {
            let fields: Vec<String> = (start..(start + 10).min(names))
                .map(|i| {
                    let v = if i % 3 == 0 { format!(r#"{{"N":"{i}.5"}}"#) } else { format!(r#"{{"S":"v{i}"}}"#) };
                    format!(r#""f{i:02}":{v}"#)
                })
                .collect();
            let m = format!(r#"{{"M":{{{}}}}}"#, fields.join(","));
            lines.push(line(&[
                ("PK", &format!(r#"{{"S":"{entity}#{start}"}}"#)),
                ("Type", &format!(r#"{{"S":"{entity}"}}"#)),
                ("m", &m),
            ]));
        }
    }
    let export = export_of(tmp.path(), &[lines]);
    let out = tmp.path().join("out");
    unwind(&[&export], &out, &[], 0);
    let r = &oracle(&py, &[(&out, &export)], &[])[0];
    let m_type = |t: &str| columns(r, t).into_iter().find(|(c, _)| c == "m").unwrap().1;
    let struct_of = |n: usize| {
        let fields: Vec<String> =
            (0..n).map(|i| format!("f{i:02}:{}", if i % 3 == 0 { "decimal(38,1)" } else { "string" })).collect();
        format!("struct<{}>", fields.join(","))
    };
    assert_eq!(m_type("m63"), struct_of(63));
    assert_eq!(m_type("m64"), struct_of(64));
    assert_eq!(m_type("m65"), "json");
    // The run report says why the 65-name maps are text.
    let widenings = run_report(&out)["widenings"].clone();
    let m65: Vec<&Json> = widenings.as_array().unwrap().iter().filter(|w| w["table"] == "m65").collect();
    assert_eq!(m65.len(), 1, "{widenings}");
    assert_eq!(m65[0]["column"], "m");
    assert_eq!(m65[0]["chosen"], "json");
    assert_eq!(m65[0]["reason"], "maps with more than 64 distinct field names: json");
}

/// More than 1024 distinct attributes: rare ones go to the `_extra` column as one DynamoDB JSON
/// item per row (named `_extra_2` here, since an attribute is called `_extra`).
#[test]
fn rare_attributes_beyond_1024_columns_go_to_extra_by_the_oracle() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let lines: Vec<String> = (0..1100)
        .map(|i| {
            line(&[
                ("PK", &format!(r#"{{"S":"W#{i}"}}"#)),
                ("Type", r#"{"S":"Wide"}"#),
                ("_extra", r#"{"S":"mine"}"#),
                (&format!("stat#{i}"), &format!(r#"{{"N":"{i}"}}"#)),
            ])
        })
        .collect();
    let export = export_of(tmp.path(), &[lines]);
    let out = tmp.path().join("out");
    unwind(&[&export], &out, &[], 0);
    let r = &oracle(&py, &[(&out, &export)], &[])[0];
    assert_eq!(
        columns(r, "wide"),
        pairs(&[("PK", "string"), ("Type", "string"), ("_extra", "string"), ("_extra_2", "extra")])
    );
    assert_eq!(r["tables"]["wide"]["rows"], 1100);
}

/// `widenings` in `_etl/run.json` and `_etl/schema/<table>.json`, for one column that widens
/// from `int64` to `decimal(38,2)` to decimal text as items are added, in three runs.
#[test]
fn widenings_and_the_schema_file_follow_each_widening() {
    let tmp = tempfile::tempdir().unwrap();
    let item = |pk: &str, n: &str| {
        line(&[("PK", &format!(r#"{{"S":"{pk}"}}"#)), ("Type", r#"{"S":"W"}"#), ("n", &format!(r#"{{"N":"{n}"}}"#))])
    };
    // Each run: the items' (PK, n) pairs, the expected `widenings` entry, the expected schema type.
    type Run<'a> = (&'a [(&'a str, &'a str)], Json, Json);
    let runs: [Run; 3] = [
        (&[("a", "1"), ("b", "-20")], Json::Null, serde_json::json!({"type": "int64"})),
        (
            &[("a", "1"), ("b", "-20"), ("c", "2.50"), ("d", "0.125")],
            serde_json::json!({"chosen": "decimal(38,3)", "reason": "2 integral and 2 fractional numbers: decimal(38,3)", "seen": {"N": 4}}),
            serde_json::json!({"type": "decimal", "precision": 38, "scale": 3}),
        ),
        (
            &[("a", "1"), ("b", "-20"), ("c", "2.50"), ("d", "0.125"), ("e", "1E+100")],
            serde_json::json!({"chosen": "decimal-text", "reason": "numbers need 101 integer and 3 fractional digits, more than decimal(38) holds: exact decimal text", "seen": {"N": 5}}),
            serde_json::json!({"type": "decimal_text"}),
        ),
    ];
    for (i, (values, widening, ty)) in runs.iter().enumerate() {
        let dir = tmp.path().join(format!("run{i}"));
        let lines: Vec<String> = values.iter().map(|(pk, n)| item(pk, n)).collect();
        let export = export_of(&dir, &[lines]);
        let out = dir.join("out");
        unwind(&[&export], &out, &[], 0);
        let report = run_report(&out);
        let mut want = Vec::new();
        if let Json::Object(w) = widening {
            let mut w = w.clone();
            w.insert("table".into(), "w".into());
            w.insert("column".into(), "n".into());
            want.push(Json::Object(w));
        }
        assert_eq!(report["widenings"], Json::Array(want), "run {i}");
        let schema: Json =
            serde_json::from_str(&std::fs::read_to_string(out.join("_etl/schema/w.json")).unwrap()).unwrap();
        assert_eq!(schema["table"], "w");
        assert_eq!(schema["entity"], "W");
        let names: Vec<&str> =
            schema["columns"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["PK", "Type", "n"]);
        let n = &schema["columns"][2];
        for (k, v) in ty.as_object().unwrap() {
            assert_eq!(&n[k], v, "run {i}: schema of `n` {n}");
        }
        assert_eq!(n["seen"], serde_json::json!({"N": values.len()}), "run {i}");
        assert_eq!(n["source"], "n");
    }
}
