"""Runs SQL files with DuckDB over an etl output, as an independent check of `etl sql`.

Usage: run_sql.py OUT_DIR SQL_FILE...
Registers every table folder of OUT_DIR as a view of its Parquet files, runs each file and prints
{file_name: [row, ...]} where a row is its values joined by single spaces (NULL for null,
(empty) for an empty string), the sqllogictest convention.
"""
import json
import os
import sys

import duckdb


def render(v):
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return v if v else "(empty)"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def main():
    out, files = sys.argv[1], sys.argv[2:]
    con = duckdb.connect()
    for t in sorted(os.listdir(out)):
        if t.startswith("_etl") or not os.path.isdir(os.path.join(out, t)):
            continue
        con.execute(f"CREATE VIEW \"{t}\" AS SELECT * FROM read_parquet('{out}/{t}/*.parquet')")
    result = {}
    for f in files:
        with open(f) as fh:
            rows = con.execute(fh.read()).fetchall()
        result[os.path.basename(f)] = [" ".join(render(v) for v in r) for r in rows]
    json.dump(result, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
