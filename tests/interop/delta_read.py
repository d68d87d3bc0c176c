"""Reads etl's Delta output with the `deltalake` package and DuckDB and prints canonical rows.

Usage: delta_read.py OUT_DIR TABLE[@VERSION]...
Prints one JSON object: {table: {"version", "delta_types", "delta_meta", "delta_rows", "files",
"duckdb_rows"}}: the table as the Delta log's current version (or VERSION) gives it (`deltalake`,
through pyarrow), and the Parquet files that version lists read by DuckDB (by column name: files
written before a column was added lack it). Rows are canonical JSON, as
read_back.py makes them, so both can be compared with what pyarrow reads from a Parquet output.
"""
import json
import sys
from urllib.parse import unquote, urlparse

import duckdb
from deltalake import DeltaTable

from read_back import row_json


def local_path(uri):
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def main():
    out, tables = sys.argv[1], sys.argv[2:]
    con = duckdb.connect()
    result = {}
    for arg in tables:
        t, _, version = arg.partition("@")
        dt = DeltaTable(f"{out}/{t}", version=int(version) if version else None)
        table = dt.to_pyarrow_table()
        names = table.schema.names
        files = sorted(local_path(u) for u in dt.file_uris())
        if files:
            cur = con.execute("SELECT * FROM read_parquet(?, union_by_name = true)", [files])
            dnames, drows = [d[0] for d in cur.description], cur.fetchall()
        else:
            dnames, drows = [], []
        result[arg] = {
            "version": dt.version(),
            "delta_types": {f.name: str(f.type) for f in table.schema},
            "delta_meta": {f.name: dict(f.metadata) for f in dt.schema().fields},
            "delta_rows": sorted(row_json(names, [r[n] for n in names]) for r in table.to_pylist()),
            "files": files,
            "duckdb_rows": sorted(row_json(dnames, r) for r in drows),
        }
    json.dump(result, sys.stdout, ensure_ascii=False, default=str)


if __name__ == "__main__":
    main()
