"""Reads etl's Parquet output back with pyarrow and DuckDB and prints canonical rows and types.

Usage: read_back.py OUT_DIR TABLE...
Prints one JSON object: {table: {"pyarrow_types", "duckdb_types", "pyarrow_meta", "pyarrow_rows",
"duckdb_rows"}}. Rows are canonical JSON (sorted keys, nulls left out, numbers as exact decimal
text, binary as base64), sorted, so they can be compared with etl's own reader.
"""
import base64
import decimal
import json
import sys

import duckdb
import pyarrow.parquet as pq


def canon(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return str(v)
    if isinstance(v, decimal.Decimal):
        s = format(v, "f")
        if "." in s:
            s = s.rstrip("0").rstrip(".")
        return "0" if s in ("-0", "") else s
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, list):
        return [None if x is None else canon(x) for x in v]
    if isinstance(v, dict):
        return {k: canon(x) for k, x in v.items() if x is not None}
    raise TypeError(f"unexpected {type(v)}: {v!r}")


def row_json(names, values):
    return json.dumps(
        {k: canon(v) for k, v in zip(names, values) if v is not None},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )


def main():
    out, tables = sys.argv[1], sys.argv[2:]
    con = duckdb.connect()
    result = {}
    for t in tables:
        path = f"{out}/{t}"
        table = pq.read_table(path)
        names = table.schema.names
        pa_rows = sorted(row_json(names, [r[n] for n in names]) for r in table.to_pylist())
        glob = f"{path}/*.parquet"
        described = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{glob}')").fetchall()
        cur = con.execute(f"SELECT * FROM read_parquet('{glob}')")
        dnames = [d[0] for d in cur.description]
        dk_rows = sorted(row_json(dnames, r) for r in cur.fetchall())
        result[t] = {
            "pyarrow_types": {f.name: str(f.type) for f in table.schema},
            "pyarrow_meta": {
                f.name: {k.decode(): v.decode() for k, v in (f.metadata or {}).items()} for f in table.schema
            },
            "duckdb_types": {row[0]: row[1] for row in described},
            "pyarrow_rows": pa_rows,
            "duckdb_rows": dk_rows,
        }
    json.dump(result, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
