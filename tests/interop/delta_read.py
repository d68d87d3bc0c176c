"""Reads etl's Delta output with the `deltalake` package and DuckDB and prints canonical rows.

Usage: delta_read.py OUT_DIR TABLE...
Prints one JSON object: {table: {"version", "delta_types", "delta_meta", "delta_rows", "files",
"duckdb_rows"}}: the table as the Delta log's current version gives it (`deltalake`, through
pyarrow), and the Parquet files that version lists read by DuckDB. Rows are canonical JSON, as
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
    for t in tables:
        dt = DeltaTable(f"{out}/{t}")
        table = dt.to_pyarrow_table()
        names = table.schema.names
        files = sorted(local_path(u) for u in dt.file_uris())
        cur = con.execute("SELECT * FROM read_parquet(?)", [files])
        dnames = [d[0] for d in cur.description]
        result[t] = {
            "version": dt.version(),
            "delta_types": {f.name: str(f.type) for f in table.schema},
            "delta_meta": {f.name: dict(f.metadata) for f in dt.schema().fields},
            "delta_rows": sorted(row_json(names, [r[n] for n in names]) for r in table.to_pylist()),
            "files": files,
            "duckdb_rows": sorted(row_json(dnames, r) for r in cur.fetchall()),
        }
    json.dump(result, sys.stdout, ensure_ascii=False, default=str)


if __name__ == "__main__":
    main()
