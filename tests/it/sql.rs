//! `etl sql`: the query library checked by sqllogictest files and by DuckDB, output formats, the
//! shell's `\d`, parameters, limits, and the read-only default.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use sqllogictest::{ColumnType as _, DBOutput, DefaultColumnType, QueryExpect, SortMode};

use crate::common::*;

fn sql(args: &[&str]) -> Run {
    let out = sample_out().to_string_lossy().into_owned();
    let mut all = vec!["sql", "--data", out.as_str()];
    all.extend_from_slice(args);
    etl(&all)
}

/// The query library: `sql/*.sql`, in name order.
pub(crate) fn library() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("sql"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    files
}

fn slt_path(sql_file: &Path) -> PathBuf {
    root().join("tests/sql").join(sql_file.file_stem().unwrap()).with_extension("slt")
}

// --- tests/sql/*.slt, run by the sqllogictest crate over the library's `Session`. -------------

/// The sample output's SQL session as a sqllogictest database.
pub(crate) struct EtlDb {
    pub(crate) session: Arc<etl::sql::Session>,
}

fn column_type(dt: &DataType) -> DefaultColumnType {
    match dt {
        dt if dt.is_integer() => DefaultColumnType::Integer,
        DataType::Float16
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => DefaultColumnType::FloatingPoint,
        _ => DefaultColumnType::Text,
    }
}

/// Each row as text cells: `NULL` for null, `(empty)` for an empty string (sqllogictest's
/// conventions, so an empty value cannot vanish into the separators).
fn render_rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for b in batches {
        let fmts: Vec<ArrayFormatter<'_>> =
            b.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap()).collect();
        for i in 0..b.num_rows() {
            let cells = b
                .columns()
                .iter()
                .zip(&fmts)
                .map(|(c, f)| {
                    let v = f.value(i).to_string();
                    if !c.is_null(i) && v.is_empty() { "(empty)".to_owned() } else { v }
                })
                .collect();
            rows.push(cells);
        }
    }
    rows
}

#[async_trait::async_trait]
impl sqllogictest::AsyncDB for EtlDb {
    type Error = etl::sql::SqlError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, etl::sql::SqlError> {
        let results = self.session.run(sql).await?;
        let Some(last) = results.last().filter(|r| !r.schema.fields().is_empty()) else {
            return Ok(DBOutput::StatementComplete(0));
        };
        let types = last.schema.fields().iter().map(|f| column_type(f.data_type())).collect();
        Ok(DBOutput::Rows { types, rows: render_rows(&last.batches) })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "etl"
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await;
    }
}

pub(crate) fn slt_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("tests/sql"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    files
}

type Records = Vec<sqllogictest::Record<DefaultColumnType>>;

fn parse_slt(path: &Path) -> Records {
    sqllogictest::parse_file(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first query of an `.slt` file: its SQL, and its expected rows in its sort mode.
fn first_query(records: &Records) -> Option<(&str, &[String], Option<SortMode>)> {
    records.iter().find_map(|r| match r {
        sqllogictest::Record::Query { sql, expected: QueryExpect::Results { results, sort_mode, .. }, .. } => {
            Some((sql.as_str(), results.as_slice(), *sort_mode))
        }
        _ => None,
    })
}

/// Makes `tests/sql/NAME.slt` start with the query of `sql/NAME.sql`, for completion: a new
/// file gets a header and an empty query; a changed query replaces the old one.
fn prepare_for_completion(sql_file: &Path) {
    let slt = slt_path(sql_file);
    let sql = std::fs::read_to_string(sql_file).unwrap();
    let sql = sql.trim_end();
    if !slt.exists() {
        let text = format!(
            "# Expected results of sql/{} over the sample export.\n# Regenerate: ETL_SLT_COMPLETE=1 ./scripts/test sql_library; checked against DuckDB by\n# duckdb_agrees_with_the_slt_files.\n\nquery T\n{sql}\n----\n\n",
            sql_file.file_name().unwrap().to_string_lossy()
        );
        std::fs::write(&slt, text).unwrap();
        return;
    }
    let mut records = parse_slt(&slt);
    let first = records.iter_mut().find_map(|r| match r {
        sqllogictest::Record::Query { sql, .. } => Some(sql),
        _ => None,
    });
    match first {
        Some(old) if old.trim() == sql.trim() => return,
        Some(old) => *old = sql.to_owned(),
        None => panic!("{} has no query", slt.display()),
    }
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&slt, text).unwrap();
}

/// Every `.slt` file through the sqllogictest runner (`rowsort`, `valuesort`, `statement ok` and
/// `error`, `query error`), over the library's session on the sample output; the first query
/// of `tests/sql/NAME.slt` must be `sql/NAME.sql`. `ETL_SLT_COMPLETE=1` rewrites the expected
/// results from etl's own (sqllogictest's completion mode); `duckdb_agrees_with_the_slt_files`
/// then checks them independently.
#[test]
fn sql_library_matches_slt_files() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let session = Arc::new(
        rt.block_on(etl::sql::Session::open(
            etl::sql::SqlOptions::new(etl::store::Target::Path(sample_out().to_owned())),
            &Default::default(),
        ))
        .unwrap(),
    );
    let complete = std::env::var_os("ETL_SLT_COMPLETE").is_some();
    let library = library();
    assert!(library.len() >= 8, "the library has {} queries", library.len());
    if complete {
        library.iter().for_each(|f| prepare_for_completion(f));
    }
    for f in &library {
        let slt = slt_path(f);
        assert!(slt.exists(), "{} is missing; run with ETL_SLT_COMPLETE=1", slt.display());
        let records = parse_slt(&slt);
        let (sql, _, _) = first_query(&records).unwrap_or_else(|| panic!("{} has no query", slt.display()));
        let want = std::fs::read_to_string(f).unwrap();
        assert_eq!(sql.trim(), want.trim(), "{} holds another version of the query", slt.display());
    }
    let files = slt_files();
    assert!(files.len() > library.len(), "tests/sql also checks the session's own rules");
    for slt in files {
        let db = session.clone();
        let mut runner = sqllogictest::Runner::new(move || {
            let session = db.clone();
            async move { Ok::<_, etl::sql::SqlError>(EtlDb { session }) }
        });
        runner.with_column_validator(sqllogictest::strict_column_validator);
        if complete {
            rt.block_on(runner.update_test_file(
                &slt,
                " ",
                sqllogictest::default_validator,
                sqllogictest::default_normalizer,
                sqllogictest::strict_column_validator,
            ))
            .unwrap_or_else(|e| panic!("{}: {e}", slt.display()));
        }
        if let Err(e) = rt.block_on(runner.run_file_async(&slt)) {
            panic!("{}", e.display(false));
        }
    }
}

/// One result cell by type and exact value, in the terms `tests/interop/run_sql.py` gives
/// DuckDB's: integers, decimals (exact text at their scale), doubles, strings, booleans,
/// timestamps (UTC epoch microseconds) and dates. Never compared through a float rendering.
#[derive(Debug, Clone, PartialEq)]
enum Typed {
    Null,
    Bool(bool),
    Int(i128),
    /// Exact decimal text at the engine's scale (`614.50`).
    Dec(String),
    F64(f64),
    Str(String),
    /// Microseconds since the epoch, UTC.
    Ts(i64),
    Date(String),
}

impl Typed {
    fn from_duckdb(cell: &serde_json::Value) -> Typed {
        let kind = cell[0].as_str().unwrap();
        let text = cell[1].as_str().unwrap_or_default();
        match kind {
            "null" => Typed::Null,
            "bool" => Typed::Bool(text == "true"),
            "int" => Typed::Int(text.parse().unwrap()),
            "dec" => Typed::Dec(text.to_owned()),
            "f64" => Typed::F64(text.parse().unwrap()),
            "str" => Typed::Str(text.to_owned()),
            "ts" => Typed::Ts(text.parse().unwrap()),
            "date" => Typed::Date(text.to_owned()),
            other => panic!("unknown kind {other}"),
        }
    }

    /// A cell of etl's result, read from its Arrow array.
    fn from_arrow(a: &dyn Array, i: usize) -> Typed {
        use datafusion::arrow::array::AsArray;
        use datafusion::arrow::datatypes::{self as t, DecimalType as _};
        if a.is_null(i) {
            return Typed::Null;
        }
        match a.data_type() {
            DataType::Int8 => Typed::Int(a.as_primitive::<t::Int8Type>().value(i).into()),
            DataType::Int16 => Typed::Int(a.as_primitive::<t::Int16Type>().value(i).into()),
            DataType::Int32 => Typed::Int(a.as_primitive::<t::Int32Type>().value(i).into()),
            DataType::Int64 => Typed::Int(a.as_primitive::<t::Int64Type>().value(i).into()),
            DataType::UInt64 => Typed::Int(a.as_primitive::<t::UInt64Type>().value(i).into()),
            DataType::Decimal128(_, s) => {
                let v = a.as_primitive::<t::Decimal128Type>().value(i);
                Typed::Dec(t::Decimal128Type::format_decimal(v, 38, *s))
            }
            DataType::Float64 => Typed::F64(a.as_primitive::<t::Float64Type>().value(i)),
            DataType::Float32 => Typed::F64(a.as_primitive::<t::Float32Type>().value(i).into()),
            DataType::Utf8 => Typed::Str(a.as_string::<i32>().value(i).to_owned()),
            DataType::LargeUtf8 => Typed::Str(a.as_string::<i64>().value(i).to_owned()),
            DataType::Utf8View => Typed::Str(a.as_string_view().value(i).to_owned()),
            DataType::Boolean => Typed::Bool(a.as_boolean().value(i)),
            DataType::Timestamp(unit, _) => {
                let v = match unit {
                    t::TimeUnit::Second => a.as_primitive::<t::TimestampSecondType>().value(i) * 1_000_000,
                    t::TimeUnit::Millisecond => a.as_primitive::<t::TimestampMillisecondType>().value(i) * 1_000,
                    t::TimeUnit::Microsecond => a.as_primitive::<t::TimestampMicrosecondType>().value(i),
                    t::TimeUnit::Nanosecond => a.as_primitive::<t::TimestampNanosecondType>().value(i) / 1_000,
                };
                Typed::Ts(v)
            }
            DataType::Date32 => {
                let days = a.as_primitive::<t::Date32Type>().value(i);
                let d = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap() + chrono::Duration::days(days.into());
                Typed::Date(d.to_string())
            }
            other => panic!("a library query returned a {other} column; teach Typed about it"),
        }
    }

    /// Whether the `.slt` text cell `text` (of sqllogictest type letter `letter`) says this value.
    fn matches_slt(&self, text: &str, letter: char) -> bool {
        match (self, letter) {
            (Typed::Null, _) => text == "NULL",
            (Typed::Int(v), 'I') => text.parse::<i128>().is_ok_and(|t| t == *v),
            (Typed::Dec(v), 'R') => text == v,
            (Typed::F64(v), 'R') => text.parse::<f64>().is_ok_and(|t| t == *v),
            (Typed::Str(v), 'T') => text == if v.is_empty() { "(empty)" } else { v.as_str() },
            (Typed::Bool(v), 'T') => text == v.to_string(),
            _ => false,
        }
    }
}

#[test]
fn duckdb_agrees_with_the_slt_files() {
    let Ok(py) = std::env::var("ETL_TEST_PYTHON") else {
        assert!(std::env::var_os("ETL_REQUIRE_INTEROP").is_none(), "ETL_TEST_PYTHON is not set");
        eprintln!("skipping: ETL_TEST_PYTHON is not set (scripts/test sets it)");
        return;
    };
    let files = library();
    let r = std::process::Command::new(py)
        .arg(root().join("tests/interop/run_sql.py"))
        .arg(sample_out())
        .args(&files)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let duck: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let session = rt
        .block_on(etl::sql::Session::open(
            etl::sql::SqlOptions::new(etl::store::Target::Path(sample_out().to_owned())),
            &Default::default(),
        ))
        .unwrap();
    let mut compared = 0;
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let records = parse_slt(&slt_path(&f));
        let (sql, slt_rows, mode) = first_query(&records).unwrap();
        let letters: Vec<char> = records
            .iter()
            .find_map(|r| match r {
                sqllogictest::Record::Query { expected: QueryExpect::Results { types, .. }, .. } => {
                    Some(types.iter().map(|t| t.to_char()).collect())
                }
                _ => None,
            })
            .unwrap();
        // etl's answer, typed, from the same session the .slt files run on.
        let results = rt.block_on(session.run(sql)).unwrap();
        let last = results.last().unwrap();
        let mut ours: Vec<Vec<Typed>> = Vec::new();
        for b in &last.batches {
            for i in 0..b.num_rows() {
                ours.push(b.columns().iter().map(|c| Typed::from_arrow(c.as_ref(), i)).collect());
            }
        }
        let theirs: Vec<Vec<Typed>> = duck[&name]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().iter().map(Typed::from_duckdb).collect())
            .collect();
        // Every library query orders its rows, so rows are compared in order.
        assert!(matches!(mode, None | Some(SortMode::NoSort)), "{name}: a sort mode is not compared by type");
        // Same types and exactly the same values: a decimal is not equal to a double, and
        // `614.50` is not `614.5`.
        assert_eq!(ours, theirs, "DuckDB's typed answer differs from etl's for {name}");
        // The .slt file's text says the same values, cell by cell, with its column types.
        assert_eq!(slt_rows.len(), theirs.len(), "{name}: rows in the .slt file");
        for (row, (text, typed)) in slt_rows.iter().zip(&theirs).enumerate() {
            // Cells are separated by single spaces; a string cell takes as many words as it has.
            let mut words = text.split(' ');
            for (v, l) in typed.iter().zip(&letters) {
                let n = match v {
                    Typed::Str(s) if !s.is_empty() => s.split(' ').count(),
                    _ => 1,
                };
                let c = words.by_ref().take(n).collect::<Vec<_>>().join(" ");
                assert!(v.matches_slt(&c, *l), "{name} row {row}: the .slt says `{c}` ({l}), DuckDB {v:?}");
                compared += 1;
            }
            assert_eq!(words.next(), None, "{name} row {row}: more cells than columns in `{text}`");
        }
    }
    assert!(compared > 100, "only {compared} cells compared");
}

#[test]
fn readme_example_runs_on_the_sample_output() {
    let r = sql(&["-f", root().join("sql/revenue_by_month.sql").to_str().unwrap(), "--format", "csv"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("month,orders,revenue\n2025-01,"), "{}", r.stdout);
    assert!(r.stderr.contains("rows in"), "timing goes to stderr: {}", r.stderr);
}

#[test]
fn output_formats() {
    let q = r#"SELECT order_id, total, coupon_codes, shipping, gift FROM "order" WHERE order_id IN ('ORD-000001', 'ORD-000002') ORDER BY order_id"#;
    for format in ["csv", "tsv", "table", "json", "ndjson"] {
        let r = sql(&[q, "--format", format]);
        assert_eq!(r.code, 0, "{format}: {}", r.stderr);
        insta::assert_snapshot!(format!("format_{format}"), r.stdout);
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("r.parquet");
    let r = sql(&[q, "--format", "parquet", "--output", file.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.is_empty());
    let reader = datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(&file).unwrap(),
    )
    .unwrap();
    assert_eq!(reader.schema().field_with_name("total").unwrap().data_type(), &DataType::Decimal128(38, 2));
    let rows: usize = reader.build().unwrap().map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, 2);
}

#[test]
fn shell_lists_tables_and_columns() {
    let out = sample_out();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_etl"))
        .args(["sql", "--data"])
        .arg(out)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        child.stdin.as_mut().unwrap(),
        b"\\d\n\\d user\nSELECT count(*)\n  AS n FROM \"order\";\n\\q\n",
    )
    .unwrap();
    let r = child.wait_with_output().unwrap();
    assert!(r.status.success());
    let stdout = String::from_utf8_lossy(&r.stdout);
    insta::assert_snapshot!("shell_d", stdout);
}

/// Piped statements go on after one fails, and the shell then exits with the failure's status:
/// a script that pipes statements in learns that one failed.
#[test]
fn a_piped_shell_goes_on_after_a_failure_and_exits_with_it() {
    let run = |input: &[u8]| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_etl"))
            .args(["sql", "--format", "csv", "--data"])
            .arg(sample_out())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), input).unwrap();
        let r = child.wait_with_output().unwrap();
        (
            r.status.code(),
            String::from_utf8_lossy(&r.stdout).into_owned(),
            String::from_utf8_lossy(&r.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = run(b"SELEC 1;\n\\d orders\nSELECT 1 AS x;\n");
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stdout, "x\n1\n", "{stderr}");
    assert!(stderr.contains("cannot parse the SQL") && stderr.contains("no table `orders`"), "{stderr}");
    let (code, stdout, stderr) = run(b"SELECT 1 AS x;\n\\q\n");
    assert_eq!((code, stdout.as_str()), (Some(0), "x\n1\n"), "{stderr}");
}

#[test]
fn named_parameters() {
    let r = sql(&[
        r#"SELECT count(*) AS n FROM "order" WHERE status = $status"#,
        "--param",
        "status=delivered",
        "--format",
        "csv",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let want = export_items(&sample_export())
        .iter()
        .filter(|i| i["Type"]["S"] == "Order" && i["status"]["S"] == "delivered")
        .count();
    assert_eq!(r.stdout, format!("n\n{want}\n"));
}

/// A join builds its hash table on the smaller of its inputs. In `sql/revenue_by_category.sql`
/// the orders are joined to `order_item ⋈ product`, the order lines with their products, which
/// has a row per line; estimated from each operator's own statistics (no distinct counts in
/// Parquet), that join looked as small as the products, and the order lines were built.
#[test]
fn a_join_builds_on_the_orders_not_on_the_order_lines() {
    let query = std::fs::read_to_string(root().join("sql/revenue_by_category.sql")).unwrap();
    let r = sql(&[&format!("EXPLAIN {query}"), "--format", "csv"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let plan = &r.stdout[r.stdout.find("physical_plan").expect("a physical plan")..];
    let join = plan.find("HashJoinExec").expect("a hash join");
    // A hash join's first input is its build side, printed first.
    let scan = |table: &str| plan[join..].find(&format!("/{table}/part-")).unwrap_or_else(|| panic!("{plan}"));
    assert!(scan("order") < scan("order_item"), "the orders are built, the order lines probe:\n{plan}");
    assert!(scan("order") < scan("product"), "{plan}");
}

#[test]
fn limits_stop_runaway_queries() {
    let cross = r#"SELECT count(*) FROM order_item a, order_item b, order_item c WHERE a.quantity + b.quantity + c.quantity > 100"#;
    let r = sql(&[cross, "--timeout", "300ms"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("--timeout") && r.stderr.contains("hint:"), "{}", r.stderr);
    let big = r#"SELECT a."SK", b."SK", count(*) FROM order_item a, order_item b GROUP BY 1, 2 ORDER BY 3 DESC"#;
    let r = sql(&[big, "--memory-limit", "2M"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("--memory-limit"), "{}", r.stderr);
}

fn tree_listing(dir: &Path) -> Vec<(PathBuf, u64)> {
    files_under(dir).into_iter().map(|p| (p.clone(), std::fs::metadata(&p).unwrap().len())).collect()
}

#[test]
fn writes_are_refused_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("written");
    let t = target.to_string_lossy();
    let forbidden = [
        "CREATE TABLE t AS SELECT 1 AS x".to_string(),
        "CREATE TABLE t (x INT)".to_string(),
        "CREATE OR REPLACE TABLE t AS SELECT * FROM \"user\"".to_string(),
        format!("CREATE EXTERNAL TABLE ext STORED AS PARQUET LOCATION '{t}'"),
        "CREATE VIEW v AS SELECT * FROM \"user\"".to_string(),
        "CREATE SCHEMA s".to_string(),
        "CREATE DATABASE d".to_string(),
        "DROP TABLE \"user\"".to_string(),
        "DROP VIEW IF EXISTS v".to_string(),
        "DROP SCHEMA IF EXISTS public".to_string(),
        "INSERT INTO \"user\" SELECT * FROM \"user\"".to_string(),
        "INSERT INTO product (sku) VALUES ('x')".to_string(),
        "UPDATE \"user\" SET name = 'x'".to_string(),
        "DELETE FROM \"user\"".to_string(),
        format!("COPY (SELECT 1 AS x) TO '{t}.parquet'"),
        format!("COPY \"user\" TO '{t}.csv' STORED AS CSV"),
        "SET datafusion.execution.batch_size = 1".to_string(),
        "SET TIME ZONE = 'UTC'".to_string(),
        "START TRANSACTION".to_string(),
        "COMMIT".to_string(),
        "ROLLBACK".to_string(),
        "TRUNCATE TABLE \"user\"".to_string(),
        "CREATE FUNCTION f() RETURNS INT RETURN 1".to_string(),
        "CREATE INDEX i ON \"user\"(email)".to_string(),
        "RESET datafusion.execution.batch_size".to_string(),
        "PREPARE p AS SELECT 1".to_string(),
        "EXPLAIN ANALYZE INSERT INTO \"user\" SELECT * FROM \"user\"".to_string(),
        "SELECT 1; DROP TABLE \"order\"".to_string(),
    ];
    let before = tree_listing(sample_out());
    let mut refused = 0;
    for stmt in &forbidden {
        let r = sql(&[stmt.as_str()]);
        assert_eq!(r.code, 2, "{stmt}: {}", r.stderr);
        assert!(r.stderr.contains("is not allowed") && r.stderr.contains("--allow-write"), "{stmt}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "nothing runs when any statement is refused: {stmt}: {}", r.stdout);
        refused += 1;
    }
    assert!(refused >= 20);
    assert_eq!(tree_listing(sample_out()), before, "no file of the output changed");
    assert!(std::fs::read_dir(tmp.path()).unwrap().next().is_none(), "no file was written");
    // Files cannot be read by path either: only the output's tables exist.
    let r = sql(&["SELECT * FROM '/etc/passwd'"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    // With --allow-write a COPY works.
    let r = sql(&[&format!("COPY (SELECT 1 AS x) TO '{t}.parquet'"), "--allow-write"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(tmp.path().join("written.parquet").exists());
    // Statements without a result set print nothing and do not stop the file: a setting and a
    // view, then a query over the view (CSV and NDJSON).
    let file = tmp.path().join("statements.sql");
    std::fs::write(
        &file,
        "SET datafusion.execution.batch_size = 7;\nCREATE VIEW n AS SELECT count(*) AS users FROM \"user\";\n\
         SELECT users, (SELECT value FROM information_schema.df_settings \
         WHERE name = 'datafusion.execution.batch_size') AS batch FROM n;\n",
    )
    .unwrap();
    let users = sql(&["SELECT count(*) FROM \"user\"", "--format", "csv"]).stdout;
    let users = users.lines().nth(1).unwrap().to_owned();
    for (format, want) in
        [("csv", format!("users,batch\n{users},7\n")), ("ndjson", format!("{{\"users\":{users},\"batch\":\"7\"}}\n"))]
    {
        let r = sql(&["--allow-write", "-f", file.to_str().unwrap(), "--format", format]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(r.stdout, want, "{format}");
        assert_eq!(
            r.stderr.lines().filter(|l| l.contains(" rows in ")).count(),
            3,
            "a line per statement: {}",
            r.stderr
        );
    }
}

/// A query of a table the output does not have names it, the output and the tables there are;
/// a CTE is not a table, and a query failing for another reason keeps DataFusion's message.
#[test]
fn an_unknown_table_is_named_with_the_tables_there_are() {
    // Exit 2, as any query that cannot be planned (1 is for a query stopped by its limits).
    let r = sql(&["SELECT count(*) FROM orders o JOIN \"order\" USING (order_id)"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let out = sample_out().to_string_lossy().into_owned();
    assert!(r.stderr.contains(&format!("error: no table `orders` in `{out}`")), "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "hint: did you mean `order`? the tables are `_rejects`, `order`, `order_item`, `product`, `review`, `user`"
        ),
        "{}",
        r.stderr
    );
    let r = sql(&["WITH orders AS (SELECT * FROM \"order\") SELECT count(*) > 0 AS any FROM orders"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "any\ntrue\n"), "{}", r.stderr);
    let r = sql(&["SELECT nme FROM \"order\""]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("nme") && !r.stderr.contains("no table"), "{}", r.stderr);
    // A statement's own target is not a missing table: this one fails for its column.
    let r = sql(&["CREATE TABLE t AS SELECT nme FROM \"order\"", "--allow-write"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("nme") && !r.stderr.contains("no table"), "{}", r.stderr);
}

#[test]
fn sql_refuses_folders_that_are_not_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let r = etl(["sql", "SELECT 1", "--data", tmp.path().to_str().unwrap()]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("not a committed etl output") && r.stderr.contains("hint:"), "{}", r.stderr);
}

/// Runs `tests/interop/shell_pty.py SCENARIO` against the sample output with `home` as `HOME`;
/// returns what the terminal showed, ending with `exit CODE`.
fn shell_on_a_terminal(scenario: &str, home: &Path) -> Option<String> {
    let python = crate::interop::python()?;
    let out = std::process::Command::new(python)
        .arg(root().join("tests/interop/shell_pty.py"))
        .arg(scenario)
        .arg(env!("CARGO_BIN_EXE_etl"))
        .arg(sample_out())
        .arg(home)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{shown}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(shown.contains("\nexit 0"), "{shown}");
    Some(shown)
}

/// The shell on a real pseudo-terminal: a statement is recalled with the up arrow, edited in
/// the middle and run again; both are appended to the history file, after the entries an
/// earlier version of etl wrote there (one plain line each).
#[test]
fn shell_recalls_and_edits_history_on_a_terminal() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join(".etl_history"), "select 1 as old;\nselect 2 as old;\n").unwrap();
    let Some(shown) = shell_on_a_terminal("edit", home.path()) else { return };
    // The edited statement ran: `40+1` gave 41, the recalled and edited `40+2` gave 42.
    assert!(shown.contains("n\r\n41"), "{shown}");
    assert!(shown.contains("n\r\n42"), "{shown}");
    assert_eq!(
        history(home.path()),
        ["select 1 as old;", "select 2 as old;", "select 40+1 as n;", "select 40+2 as n;"]
    );
}

/// The entries of `~/.etl_history` under `home`, oldest first (the editor's version header left
/// out).
fn history(home: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(home.join(".etl_history")).unwrap();
    text.lines().filter(|l| *l != "#V2").map(str::to_owned).collect()
}

/// The same with wide characters: after the recall, eight left arrows cross `;`, `w`, ` `, `s`,
/// `a`, ` `, `'` and `本`, so the cursor sits on `本`, at terminal column 15 (`etl> select '` is
/// 13 columns and `日` two); a character typed there lands before `本`, on screen and in the
/// statement. (The hand-written editor this replaces counted characters, not columns.)
#[test]
fn shell_edits_wide_characters_on_a_terminal() {
    let home = tempfile::tempdir().unwrap();
    let Some(shown) = shell_on_a_terminal("wide", home.path()) else { return };
    let cursor = shown.lines().find_map(|l| l.strip_prefix("cursor ")).unwrap_or_else(|| panic!("{shown}"));
    let (row, col) = cursor.split_once(' ').unwrap();
    assert_eq!(col, "15", "cursor at row {row}, column {col}:\n{shown}");
    assert!(shown.contains("w\r\n日語本"), "the edited statement ran: {shown}");
    assert!(shown.lines().any(|l| l == "screen| etl> select '日語本' as w;"), "{shown}");
    assert_eq!(history(home.path()), ["select '日本' as w;", "select '日語本' as w;"]);
}

/// Ctrl-C during a query stops the query, not the shell.
#[test]
fn ctrl_c_cancels_the_query_and_keeps_the_shell() {
    let home = tempfile::tempdir().unwrap();
    let Some(shown) = shell_on_a_terminal("cancel", home.path()) else { return };
    assert!(shown.contains("error: query cancelled"), "{shown}");
    assert!(shown.contains("k\r\n7"), "the shell ran the next statement: {shown}");
}
