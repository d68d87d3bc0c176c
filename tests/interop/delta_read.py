"""Reads etl's Delta output with the `deltalake` package and DuckDB and prints canonical rows.

Usage: delta_read.py OUT_DIR|s3://BUCKET/PREFIX TABLE[@VERSION]...
Prints one JSON object: {table: {"version", "delta_types", "delta_meta", "delta_rows", "files",
"duckdb_rows"}}: the table as the Delta log's current version (or VERSION) gives it (`deltalake`,
through pyarrow), and the Parquet files that version lists read by DuckDB (by column name: files
written before a column was added lack it). Rows are canonical JSON, as
read_back.py makes them, so both can be compared with what pyarrow reads from a Parquet output.
An `s3://` output is read with the `AWS_*` variables of the environment (`AWS_ENDPOINT_URL` for
moto); its files are read by pyarrow's S3 file system instead of DuckDB (which would need an
extension download), under "file_rows".

A table with deletion vectors (`etl unwind --deletion-vectors`: protocol reader 3) is one the
package's pyarrow dataset refuses, so it is read through the package's DataFusion reader
(`QueryBuilder`, "reader": "datafusion"), and DuckDB reads its files with `file_row_number` and
drops the rows the vectors delete, as `DeltaTable.deletion_vectors()` lists them for the version.
"""
import json
import os
import sys
from urllib.parse import unquote, urlparse

import duckdb
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from read_back import row_json


def local_path(uri):
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def s3_options():
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    options = {"AWS_REGION": os.environ.get("AWS_REGION", "us-east-1")}
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        if k in os.environ:
            options[k] = os.environ[k]
    if endpoint:
        options["AWS_ENDPOINT_URL"] = endpoint
        options["AWS_ALLOW_HTTP"] = "true" if endpoint.startswith("http://") else "false"
    return options


def s3_file_rows(uris):
    from pyarrow import fs
    import pyarrow.parquet as pq

    endpoint = urlparse(os.environ.get("AWS_ENDPOINT_URL", ""))
    s3 = fs.S3FileSystem(
        region=os.environ.get("AWS_REGION", "us-east-1"),
        endpoint_override=endpoint.netloc or None,
        scheme=endpoint.scheme or "https",
        access_key=os.environ.get("AWS_ACCESS_KEY_ID"),
        secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY"),
    )
    rows = []
    for uri in uris:
        parsed = urlparse(uri)
        table = pq.read_table(parsed.netloc + unquote(parsed.path), filesystem=s3)
        names = table.schema.names
        rows.extend(row_json(names, [r[n] for n in names]) for r in table.to_pylist())
    return sorted(rows)


def main():
    out, tables = sys.argv[1], sys.argv[2:]
    s3 = out.startswith("s3://")
    con = duckdb.connect()
    result = {}
    for arg in tables:
        t, _, version = arg.partition("@")
        dt = DeltaTable(
            f"{out.rstrip('/')}/{t}",
            version=int(version) if version else None,
            storage_options=s3_options() if s3 else None,
        )
        vectors = "deletionVectors" in (dt.protocol().reader_features or [])
        if vectors:
            table = pa.table(QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all())
            kept = {
                local_path(v["filepath"]): v["selection_vector"]
                for v in pa.table(dt.deletion_vectors().read_all()).to_pylist()
            }
        else:
            table = dt.to_pyarrow_table()
        names = table.schema.names
        files = sorted(local_path(u) for u in dt.file_uris())
        if s3:
            dnames, drows = [], []
        elif files and vectors:
            cur = con.execute(
                "SELECT * FROM read_parquet(?, union_by_name = true, filename = true, file_row_number = true)",
                [files],
            )
            cols = [d[0] for d in cur.description]
            fi, ri = cols.index("filename"), cols.index("file_row_number")
            dnames = [c for c in cols if c not in ("filename", "file_row_number")]
            drows = []
            for r in cur.fetchall():
                sel = kept.get(r[fi])
                if sel is None or r[ri] >= len(sel) or sel[r[ri]]:
                    drows.append(tuple(v for i, v in enumerate(r) if i not in (fi, ri)))
        elif files:
            cur = con.execute("SELECT * FROM read_parquet(?, union_by_name = true)", [files])
            dnames, drows = [d[0] for d in cur.description], cur.fetchall()
        else:
            dnames, drows = [], []
        result[arg] = {
            "version": dt.version(),
            "reader": "datafusion" if vectors else "pyarrow",
            "delta_types": {f.name: str(f.type) for f in table.schema},
            "delta_meta": {f.name: dict(f.metadata) for f in dt.schema().fields},
            "delta_rows": sorted(row_json(names, [r[n] for n in names]) for r in table.to_pylist()),
            "files": files,
            "duckdb_rows": sorted(row_json(dnames, r) for r in drows),
        }
        if s3:
            result[arg]["file_rows"] = s3_file_rows(files)
    json.dump(result, sys.stdout, ensure_ascii=False, default=str)


if __name__ == "__main__":
    main()
