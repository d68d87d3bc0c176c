//! Table shapes that break naive writers or readers: attribute names that differ only in case,
//! entities with tens of thousands of dynamic attribute names, type values longer than a file
//! name. Each is read back by an independent reader (DuckDB) where it matters.

use datafusion::arrow::array::Array as _;

use crate::common::*;
use crate::interop::python;

/// Rows of a DuckDB query, each row's first column as text.
fn duckdb_lines(py: &str, query: &str) -> Vec<String> {
    let script = "import duckdb, sys\nfor (v,) in duckdb.sql(sys.argv[1]).fetchall():\n    print(v)\n";
    let r = std::process::Command::new(py).args(["-c", script, query]).output().expect("run python");
    assert!(r.status.success(), "duckdb failed: {}", String::from_utf8_lossy(&r.stderr));
    String::from_utf8_lossy(&r.stdout).lines().map(str::to_owned).collect()
}

/// `Price` and `price` on one item: two columns whose names readers that fold case (DuckDB,
/// Spark, Athena, Redshift) can tell apart, the renaming recorded in the report.
#[test]
fn case_only_collisions_get_distinct_names() {
    let tmp = tempfile::tempdir().unwrap();
    let data = r#"{"Item":{"PK":{"S":"P#1"},"Type":{"S":"Product"},"Price":{"N":"1.5"},"price":{"N":"2"}}}
{"Item":{"PK":{"S":"P#2"},"Type":{"S":"Product"},"Price":{"N":"3"},"price":{"N":"4"}}}
"#;
    let export = write_export(tmp.path(), &[gzip(data.as_bytes())], &[2]);
    let out = tmp.path().join("out");
    let run = unwind(&[&export], &out, &[], 0);
    assert!(run.stderr.contains("attribute `price` is column `price_2`"), "{}", run.stderr);
    let report = run_report(&out);
    assert_eq!(report["renamed_columns"][0]["attribute"], "price");
    assert_eq!(report["renamed_columns"][0]["column"], "price_2");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("_etl/schema/product.json")).unwrap()).unwrap();
    let cols: Vec<(&str, &str)> = schema["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["source"].as_str().unwrap()))
        .collect();
    assert!(cols.contains(&("Price", "Price")) && cols.contains(&("price_2", "price")), "{cols:?}");
    if let Some(py) = python() {
        let glob = out.join("product/*.parquet");
        let q = format!(
            "SELECT \"Price\"::VARCHAR || ',' || price_2::VARCHAR FROM read_parquet('{}') ORDER BY \"PK\"",
            glob.display()
        );
        let got = duckdb_lines(&py, &q);
        assert_eq!(got, vec!["1.5,2".to_owned(), "3.0,4".to_owned()]);
    }
}

/// 50,000 items of one entity, each with its own attribute name (`stat#N`): a few columns and
/// the rest in `_extra`, in seconds and bounded memory (the run used to take minutes and GBs).
#[test]
fn dynamic_attribute_names_stay_out_of_the_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 50_000usize;
    let mut data = String::with_capacity(n * 120);
    for i in 0..n {
        data.push_str(&format!(
            r#"{{"Item":{{"PK":{{"S":"DEV#{}"}},"SK":{{"S":"DAY#{i}"}},"Type":{{"S":"Stats"}},"stat#{i}":{{"N":"{i}"}}}}}}"#,
            i % 7
        ));
        data.push('\n');
    }
    let export = write_export(tmp.path(), &[gzip(data.as_bytes())], &[n as u64]);
    let out = tmp.path().join("out");
    let started = std::time::Instant::now();
    let run = unwind(&[&export], &out, &[], 0);
    let took = started.elapsed();
    assert!(took.as_secs() < 60, "took {took:?}");
    assert!(run.stderr.contains("kept in column `_extra`"), "{}", run.stderr);
    let (schema, batches) = read_table(&out.join("stats"));
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, vec!["PK", "SK", "Type", "_extra"]);
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), n);
    // Each row's `_extra` holds exactly its own `stat#i`, exact.
    let extra: Vec<String> = batches
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name("_extra").unwrap();
            let c = c.as_any().downcast_ref::<datafusion::arrow::array::StringArray>().unwrap().clone();
            (0..c.len()).map(move |i| c.value(i).to_owned())
        })
        .collect();
    for i in [0, 1, 12_345, n - 1] {
        assert_eq!(extra[i], format!(r#"{{"stat#{i}":{{"N":"{i}"}}}}"#));
    }
    let report = run_report(&out);
    assert_eq!(report["demoted_attributes"][0]["attributes"], n as u64);
}

/// A type value longer than a file name may be still gets its table.
#[test]
fn type_values_of_any_length_get_a_table() {
    let tmp = tempfile::tempdir().unwrap();
    let long = "VeryLongEntityName".repeat(30);
    let data = format!(
        "{}\n{}\n",
        format_args!(r#"{{"Item":{{"PK":{{"S":"1"}},"Type":{{"S":"{long}"}}}}}}"#),
        format_args!(r#"{{"Item":{{"PK":{{"S":"2"}},"Type":{{"S":"{long}x"}}}}}}"#)
    );
    let export = write_export(tmp.path(), &[gzip(data.as_bytes())], &[2]);
    let out = tmp.path().join("out");
    let run = unwind(&[&export], &out, &[], 0);
    assert!(run.stderr.contains("too long for a table name"), "{}", run.stderr);
    let report = run_report(&out);
    let tables: Vec<&str> = report["tables"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    let entity_tables: Vec<&&str> = tables.iter().filter(|t| !t.starts_with('_')).collect();
    assert_eq!(entity_tables.len(), 2, "{tables:?}");
    for t in entity_tables {
        assert!(t.len() <= 96, "{t}");
        assert_eq!(count_rows(&out.join(t)), 1);
    }
}

/// Pass one reads the largest file first: here the second file, which holds all but one item.
/// Columns still follow where the input first has each attribute (`early`, in the small first
/// file, before `late`), and the bytes are the same whatever `--threads` is.
#[test]
fn columns_follow_the_input_when_a_larger_later_file_is_read_first() {
    let tmp = tempfile::tempdir().unwrap();
    let small = r#"{"Item":{"PK":{"S":"A#0"},"Type":{"S":"Thing"},"early":{"S":"x"}}}
"#;
    let n = 3000u64;
    let large: String = (1..=n)
        .map(|i| {
            format!(
                r#"{{"Item":{{"PK":{{"S":"A#{i}"}},"Type":{{"S":"Thing"}},"late":{{"N":"{i}"}},"early":{{"S":"y"}}}}}}"#
            ) + "\n"
        })
        .collect();
    let export = write_export(tmp.path(), &[gzip(small.as_bytes()), gzip(large.as_bytes())], &[1, n]);
    let mut digests = Vec::new();
    for threads in ["1", "2"] {
        let out = tmp.path().join(format!("out-{threads}"));
        unwind(&[&export], &out, &["--threads", threads], 0);
        let (schema, batches) = read_table(&out.join("thing"));
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["PK", "Type", "early", "late"], "--threads {threads}");
        assert_eq!(batches.iter().map(|b| b.num_rows() as u64).sum::<u64>(), n + 1);
        let mut parts: Vec<_> = std::fs::read_dir(out.join("thing")).unwrap().map(|e| e.unwrap().path()).collect();
        parts.sort();
        digests.push(parts.iter().map(|p| md5_b64(&std::fs::read(p).unwrap())).collect::<Vec<_>>());
    }
    assert_eq!(digests[0], digests[1], "the table's files differ between --threads 1 and 2");
}
