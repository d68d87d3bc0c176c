//! pyarrow and DuckDB (from the test venv) read every output table with the same values and
//! types as etl's own reader.

use std::path::Path;

use serde_json::Value as Json;

use crate::common::*;

pub fn python() -> Option<String> {
    match std::env::var("ETL_TEST_PYTHON") {
        Ok(p) => Some(p),
        Err(_) => {
            assert!(
                std::env::var_os("ETL_REQUIRE_INTEROP").is_none(),
                "ETL_TEST_PYTHON is not set; run the suite with scripts/test"
            );
            eprintln!("skipping interop test: ETL_TEST_PYTHON is not set (scripts/test sets it)");
            None
        }
    }
}

pub(crate) fn read_back(py: &str, out: &Path, tables: &[&str]) -> Json {
    let r = std::process::Command::new(py)
        .arg(root().join("tests/interop/read_back.py"))
        .arg(out)
        .args(tables)
        .output()
        .expect("run python");
    assert!(r.status.success(), "read_back.py failed: {}", String::from_utf8_lossy(&r.stderr));
    serde_json::from_slice(&r.stdout).unwrap()
}

#[test]
fn pyarrow_and_duckdb_read_every_table_exactly() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    unwind(&[&sample_export()], &out, &["--row-group-rows", "500"], 0);
    let tables = ["user", "order", "order_item", "product", "review", "_rejects"];
    let got = read_back(&py, &out, &tables);
    for t in tables {
        let ours: Vec<Json> = canonical_rows(&out.join(t)).into_iter().map(Json::String).collect();
        assert_eq!(got[t]["pyarrow_rows"].as_array().unwrap(), &ours, "pyarrow values of {t}");
        assert_eq!(got[t]["duckdb_rows"].as_array().unwrap(), &ours, "duckdb values of {t}");
    }
    let ty =
        |t: &str, reader: &str, col: &str| got[t][format!("{reader}_types")][col].as_str().unwrap_or("?").to_owned();
    assert_eq!(ty("order", "pyarrow", "total"), "decimal128(38, 2)");
    assert_eq!(ty("order", "duckdb", "total"), "DECIMAL(38,2)");
    assert_eq!(ty("user", "pyarrow", "lifetime_points"), "decimal128(38, 0)");
    assert_eq!(ty("user", "pyarrow", "signup_at"), "int64");
    assert_eq!(ty("user", "duckdb", "signup_at"), "BIGINT");
    assert_eq!(ty("user", "pyarrow", "tags"), "list<item: string>");
    assert_eq!(ty("user", "duckdb", "tags"), "VARCHAR[]");
    assert_eq!(ty("user", "pyarrow", "avatar"), "binary");
    assert_eq!(ty("user", "duckdb", "avatar"), "BLOB");
    assert_eq!(ty("user", "pyarrow", "verified"), "bool");
    assert!(ty("order", "pyarrow", "shipping").starts_with("struct<"), "{}", ty("order", "pyarrow", "shipping"));
    assert!(ty("order", "duckdb", "shipping").starts_with("STRUCT("), "{}", ty("order", "duckdb", "shipping"));
    assert!(ty("product", "pyarrow", "images").starts_with("list<item: binary>"));
    assert_eq!(got["user"]["pyarrow_meta"]["tags"]["dynamodb.type"], "SS");
    assert_eq!(got["product"]["pyarrow_meta"]["images"]["dynamodb.type"], "BS");
}

#[test]
fn pyarrow_and_duckdb_read_rejects_and_odd_numbers() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let lines = [
        r#"{"Item":{"PK":{"S":"1"},"Type":{"S":"N"},"big":{"N":"12345678901234567890123456789012345678"},"tiny":{"N":"1E-130"},"mix":{"N":"1"},"frac":{"N":"0.12345678901234567890123456789012345678"}}}"#,
        r#"{"Item":{"PK":{"S":"2"},"Type":{"S":"N"},"big":{"N":"-1"},"tiny":{"N":"9.9999999999999999999999999999999999999E+125"},"mix":{"S":"one"},"frac":{"N":"-0.5"}}}"#,
        r#"{"Item":{"PK":{"S":"3"},"Type":{"S":"N"},"big":{"N":"1.5"}}}"#,
        r#"{"Item":{"PK":{"S":"bad"},"x":{"N":"1e999"}}}"#,
    ];
    let data = gzip((lines.join("\n") + "\n").as_bytes());
    let export = write_export(tmp.path(), &[data], &[4]);
    let out = tmp.path().join("out");
    unwind(&[&export], &out, &[], 0);
    let got = read_back(&py, &out, &["n", "_rejects"]);
    for t in ["n", "_rejects"] {
        let ours: Vec<Json> = canonical_rows(&out.join(t)).into_iter().map(Json::String).collect();
        assert_eq!(got[t]["pyarrow_rows"].as_array().unwrap(), &ours, "pyarrow values of {t}");
        assert_eq!(got[t]["duckdb_rows"].as_array().unwrap(), &ours, "duckdb values of {t}");
    }
    let types = &got["n"]["pyarrow_types"];
    assert_eq!(types["frac"], "decimal128(38, 38)");
    assert_eq!(types["tiny"], "string", "beyond decimal(38): exact decimal text");
    assert_eq!(types["mix"], "string", "mixed types: DynamoDB JSON text");
    let rows: String =
        got["n"]["pyarrow_rows"].as_array().unwrap().iter().filter_map(Json::as_str).collect::<Vec<_>>().join("\n");
    assert!(rows.contains("12345678901234567890123456789012345678"), "{rows}");
    assert!(rows.contains(&format!("0.{}1", "0".repeat(129))), "{rows}");
    assert!(rows.contains(r#"{\"S\":\"one\"}"#), "{rows}");
}
