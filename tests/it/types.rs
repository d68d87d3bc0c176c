//! Every column type of the mapping language, read back by readers that are not etl:
//! `tests/mappings/every-type.toml` unwinds `tests/mappings/every-type.jsonl`, and
//! `tests/interop/every_type.py` has pyarrow and DuckDB read every table, checking the types they
//! see and every value against expectations it computes from the items (Python's `decimal`,
//! `json`, `base64` and `datetime`; no etl code).

use std::path::Path;

use serde_json::Value as Json;

use crate::common::*;
use crate::interop::python;

fn every_type() -> (std::path::PathBuf, std::path::PathBuf) {
    (root().join("tests/mappings/every-type.toml"), root().join("tests/mappings/every-type.jsonl"))
}

/// Unwinds the every-type items with their mapping into `dir/out`.
fn unwind_every_type(dir: &Path) -> std::path::PathBuf {
    let (mapping, items) = every_type();
    let text = std::fs::read(&items).unwrap();
    let count = text.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count() as u64;
    let export = write_export(dir, &[gzip(&text)], &[count]);
    let out = dir.join("out");
    unwind(&[&export], &out, &["--mapping", mapping.to_str().unwrap()], 0);
    out
}

#[test]
fn pyarrow_and_duckdb_read_every_mapped_type_as_documented() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = unwind_every_type(tmp.path());
    let (_, items) = every_type();
    let r = std::process::Command::new(&py)
        .arg(root().join("tests/interop/every_type.py"))
        .arg(&out)
        .arg(&items)
        .output()
        .expect("run python");
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "every_type.py found mismatches:\n{stderr}");
    let got: Json = serde_json::from_slice(&r.stdout).unwrap();
    // The fixture's facts, by hand: three things (the fourth has a non-integral `qty_total`, the
    // fifth a type no entity takes), three parts, two rejects; and values were compared.
    let rows = |t: &str| got["tables"][t]["rows"].as_u64().unwrap();
    let cells = |t: &str| got["tables"][t]["cells"].as_u64().unwrap();
    assert_eq!((rows("things"), rows("thing_parts"), rows("_rejects")), (3, 3, 2), "{got}");
    // Every column of every row, by both readers: 37 columns in `things` (5 from keys, 31
    // declared, `_extra`), 8 in `thing_parts`.
    assert_eq!(cells("things"), 2 * 3 * 37, "{got}");
    assert_eq!(cells("thing_parts"), 2 * 3 * 8, "{got}");
}

/// `etl sql` reads a seconds column (stored in milliseconds) as the same instants: each row is
/// selected only when its timestamps equal the instants written by hand from the items.
#[test]
fn sql_reads_seconds_timestamps_as_instants() {
    let tmp = tempfile::tempdir().unwrap();
    let out = unwind_every_type(tmp.path());
    let query = "SELECT thing_id FROM things WHERE \
        (thing_id = 't1' AND made_at = TIMESTAMP '2025-07-16T10:51:30Z' AND at_s = made_at \
          AND moments[3] = made_at AND place.seen_at = TIMESTAMP '2023-11-14T22:13:20Z' \
          AND at_ms = TIMESTAMP '2025-07-16T10:51:30.123Z') \
        OR (thing_id = 't2' AND made_at = TIMESTAMP '1970-01-01T00:00:00Z') \
        OR (thing_id = 't3' AND made_at = TIMESTAMP '1970-01-01T00:00:01Z' \
          AND at_s = TIMESTAMP '1969-07-20T20:17:40Z') \
        ORDER BY thing_id";
    assert_eq!(sql_csv(out.to_str().unwrap(), &[query]), "thing_id\nt1\nt2\nt3\n");
}
