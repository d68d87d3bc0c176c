"""Runs SQL files with DuckDB over an etl output, as an independent check of `etl sql`.

Usage: run_sql.py OUT_DIR SQL_FILE...
Registers every table folder of OUT_DIR as a view of its Parquet files, runs each file and prints
{file_name: [row, ...]} where a row is a list of typed cells `[kind, text]`, so the caller can
compare values by type rather than by rendering: `["null", null]`, `["bool", "true"]`,
`["int", "42"]`, `["dec", "614.50"]` (exact, with DuckDB's scale), `["f64", repr]` (Python's
shortest round-trip text of the double), `["str", text]`, `["ts", epoch microseconds]` (UTC),
`["date", "YYYY-MM-DD"]`.
"""
import datetime as dt
import decimal
import json
import os
import sys

import duckdb

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def typed(v):
    if v is None:
        return ["null", None]
    if isinstance(v, bool):
        return ["bool", "true" if v else "false"]
    if isinstance(v, int):
        return ["int", str(v)]
    if isinstance(v, decimal.Decimal):
        return ["dec", str(v)]
    if isinstance(v, float):
        return ["f64", repr(v)]
    if isinstance(v, str):
        return ["str", v]
    if isinstance(v, dt.datetime):
        t = v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)
        delta = t - EPOCH
        return ["ts", str((delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds)]
    if isinstance(v, dt.date):
        return ["date", v.isoformat()]
    raise TypeError(f"unexpected {type(v).__name__}: {v!r}")


def main():
    out, files = sys.argv[1], sys.argv[2:]
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for t in sorted(os.listdir(out)):
        if t.startswith("_etl") or not os.path.isdir(os.path.join(out, t)):
            continue
        con.execute(f"CREATE VIEW \"{t}\" AS SELECT * FROM read_parquet('{out}/{t}/*.parquet')")
    result = {}
    for f in files:
        with open(f) as fh:
            rows = con.execute(fh.read()).fetchall()
        result[os.path.basename(f)] = [[typed(v) for v in r] for r in rows]
    json.dump(result, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
