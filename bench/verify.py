#!/usr/bin/env python3
"""Checks an `etl unwind` output of a sample export before the bench reports its time.

The oracle is independent of etl: the manifest's itemCount, and DuckDB's own parse of the same
data files (`bench/duckdb_unwind.py`, told the schema). etl's Parquet is read by DuckDB.

    python bench/verify.py --etl ETL_OUT [--duckdb DUCKDB_OUT] [--mapped] --summary manifest-summary.json

Checks, each printed; exit 1 on the first that fails:
1. `_etl/run.json` exists, every file it lists exists with its size, the reconciliation is
   balanced and matches the manifest, no rejects;
2. the rows of etl's entity tables, counted by DuckDB from the Parquet files, add up to the
   manifest's itemCount, and (with --duckdb) each table has DuckDB's row count for its `Type`;
3. (with --duckdb) every item is in both outputs with the same keys (PK, SK), and a sample of typed values per
   entity (numbers as DECIMAL or BIGINT, strings, booleans) is equal row for row.

With --mapped, ETL_OUT is a run with `mappings/ecommerce.toml`: its tables are the mapping's
(`users`, `orders`, ...), keyed by the columns the mapping parses out of PK and SK, so rows are
matched to DuckDB's by those natural keys instead, and the child table `order_lines` must hold
as many rows as the orders' `lines` lists have elements.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import duckdb

# Type -> (etl table, columns compared: etl name, DuckDB output name, SQL type both are cast to).
ENTITIES = {
    "User": ("user", [("email", "email", "VARCHAR"), ("login_count", "login_count", "BIGINT"),
                      ("lifetime_points", "lifetime_points", "DECIMAL(38,0)"), ("verified", "verified", "BOOLEAN")]),
    "Order": ("order", [("order_id", "order_id", "VARCHAR"), ("total", "total", "DECIMAL(38,2)"),
                        ("item_count", "item_count", "BIGINT"), ("ordered_at", "ordered_at", "BIGINT")]),
    "OrderItem": ("order_item", [("sku", "sku", "VARCHAR"), ("quantity", "quantity", "BIGINT"),
                                 ("unit_price", "unit_price", "DECIMAL(38,2)")]),
    "Product": ("product", [("sku", "sku", "VARCHAR"), ("price", "price", "DECIMAL(38,2)"),
                            ("stock", "stock", "BIGINT")]),
    "Review": ("review", [("rating", "rating", "BIGINT"), ("helpful_votes", "helpful_votes", "BIGINT"),
                          ("title", "title", "VARCHAR")]),
}

# With `mappings/ecommerce.toml`: Type -> (etl table, join keys (etl SQL over view `e`, DuckDB
# column), columns compared). The keys are the ones the mapping parses out of PK and SK.
MAPPED = {
    "User": ("users", [('e."email"', "email")], [("name", "name", "VARCHAR"), ("login_count", "login_count", "BIGINT"),
                                             ("lifetime_points", "lifetime_points", "DECIMAL(38,0)"),
                                             ("verified", "verified", "BOOLEAN")]),
    "Order": ("orders", [('e."order_id"', "order_id")], [("total", "total", "DECIMAL(38,2)"),
                                                     ("item_count", "item_count", "BIGINT"),
                                                     ("status", "status", "VARCHAR")]),
    "OrderItem": ("order_items", [('e."order_id"', "order_id"), ('e."sku"', "sku")],
                  [("quantity", "quantity", "BIGINT"), ("unit_price", "unit_price", "DECIMAL(38,2)")]),
    "Product": ("products", [('e."sku"', "sku")], [("name", "name", "VARCHAR"), ("price", "price", "DECIMAL(38,2)"),
                                               ("stock", "stock", "BIGINT")]),
    "Review": ("reviews", [('e."sku"', "sku"), ('e."reviewer_email"', "reviewer_email"),
                           ('epoch(e."reviewed_at")::BIGINT', "reviewed_at")],
               [("rating", "rating", "BIGINT"), ("helpful_votes", "helpful_votes", "BIGINT"),
                ("title", "title", "VARCHAR")]),
}


def fail(msg: str) -> None:
    print(f"verify: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def ok(msg: str) -> None:
    print(f"verify: ok: {msg}", file=sys.stderr)


def quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--etl", required=True)
    ap.add_argument("--duckdb", help="DuckDB's output of the same export (without: counts only)")
    ap.add_argument("--mapped", action="store_true", help="ETL_OUT was written with mappings/ecommerce.toml")
    ap.add_argument("--summary", required=True)
    args = ap.parse_args()

    with open(args.summary) as f:
        item_count = int(json.load(f)["itemCount"])
    run_path = os.path.join(args.etl, "_etl", "run.json")
    if not os.path.isfile(run_path):
        fail(f"{run_path} is missing: etl did not publish")
    with open(run_path) as f:
        run = json.load(f)
    rec = run["reconciliation"]
    if not (rec["balanced"] and rec["matches_manifest"] and rec["manifest_item_count"] == item_count):
        fail(f"run.json does not reconcile with the manifest ({item_count} items): {rec}")
    if rec["rejects"] != 0:
        fail(f"{rec['rejects']} rejects on a clean sample export")
    files = {}
    for t in run["tables"]:
        paths = []
        for fl in t["files"]:
            p = os.path.join(args.etl, fl["path"])
            if not os.path.isfile(p) or os.path.getsize(p) != fl["bytes"]:
                fail(f"{p} is missing or not {fl['bytes']} bytes")
            paths.append(p)
        files[t["name"]] = paths
    ok(f"run.json reconciles with the manifest ({item_count} items), every listed file is there")

    con = duckdb.connect()
    if not args.duckdb:
        total = 0
        for name, paths in files.items():
            # A mapping's child table holds list elements, not items.
            if name != "_rejects" and not (args.mapped and name == "order_lines"):
                listing = "[" + ", ".join(quote(p) for p in paths) + "]"
                total += con.execute(f"SELECT count(*) FROM read_parquet({listing})").fetchone()[0]
        if total != item_count:
            fail(f"the tables hold {total} rows, the manifest {item_count} items")
        ok(f"{total} rows in all, counted by DuckDB, as the manifest says")
        return 0
    if args.mapped:
        return check_mapped(con, files, args.duckdb, item_count)
    total = 0
    for entity, (table, columns) in ENTITIES.items():
        rows = open_pair(con, files, table, entity, args.duckdb)
        total += rows
        (joined,) = con.execute('SELECT count(*) FROM e JOIN d ON e."PK" = d.pk AND e."SK" = d.sk').fetchone()
        if joined != rows:
            fail(f"`{table}`: {rows} rows but only {joined} have a (PK, SK) of DuckDB's output")
        differ = " OR ".join(
            f'CAST(e."{a}" AS {ty}) IS DISTINCT FROM CAST(d."{b}" AS {ty})' for a, b, ty in columns
        )
        (bad,) = con.execute(
            f'SELECT count(*) FROM e JOIN d ON e."PK" = d.pk AND e."SK" = d.sk WHERE {differ}'
        ).fetchone()
        if bad:
            example = con.execute(
                f'SELECT e."PK", e."SK" FROM e JOIN d ON e."PK" = d.pk AND e."SK" = d.sk WHERE {differ} LIMIT 1'
            ).fetchone()
            fail(f"`{table}`: {bad} rows differ from DuckDB's in {[c[0] for c in columns]}, e.g. {example}")
        ok(f"`{table}`: {rows} rows, keys and {len(columns)} columns equal to DuckDB's")
    if total != item_count:
        fail(f"the entity tables hold {total} rows, the manifest {item_count} items")
    ok(f"{total} rows in all, as the manifest says")
    return 0


def open_pair(con: duckdb.DuckDBPyConnection, files: dict, table: str, entity: str, duckdb_out: str) -> int:
    """Views `e` (etl's `table`) and `d` (DuckDB's output for `entity`); fails unless their row
    counts agree, and returns the count."""
    if table not in files:
        fail(f"no table `{table}` for Type `{entity}`")
    listing = "[" + ", ".join(quote(p) for p in files[table]) + "]"
    con.execute(f"CREATE OR REPLACE VIEW e AS SELECT * FROM read_parquet({listing})")
    duck = os.path.join(duckdb_out, f"{entity}.parquet")
    con.execute(f"CREATE OR REPLACE VIEW d AS SELECT * FROM read_parquet({quote(duck)})")
    (rows,) = con.execute("SELECT count(*) FROM e").fetchone()
    (want,) = con.execute("SELECT count(*) FROM d").fetchone()
    if rows != want:
        fail(f"`{table}` has {rows} rows, DuckDB counts {want} items of Type `{entity}`")
    return rows


def check_mapped(con: duckdb.DuckDBPyConnection, files: dict, duckdb_out: str, item_count: int) -> int:
    total = 0
    for entity, (table, keys, columns) in MAPPED.items():
        rows = open_pair(con, files, table, entity, duckdb_out)
        total += rows
        on = " AND ".join(f'{a} = d."{b}"' for a, b in keys)
        (joined,) = con.execute(f"SELECT count(*) FROM e JOIN d ON {on}").fetchone()
        if joined != rows:
            fail(f"`{table}`: {rows} rows but {joined} matches of {[k[1] for k in keys]} in DuckDB's output")
        differ = " OR ".join(
            f'CAST(e."{a}" AS {ty}) IS DISTINCT FROM CAST(d."{b}" AS {ty})' for a, b, ty in columns
        )
        (bad,) = con.execute(f"SELECT count(*) FROM e JOIN d ON {on} WHERE {differ}").fetchone()
        if bad:
            fail(f"`{table}`: {bad} rows differ from DuckDB's in {[c[0] for c in columns]}")
        ok(f"`{table}`: {rows} rows, keys {[k[1] for k in keys]} and {len(columns)} columns equal to DuckDB's")
    if total != item_count:
        fail(f"the entity tables hold {total} rows, the manifest {item_count} items")
    ok(f"{total} rows in all, as the manifest says")
    if "order_lines" not in files:
        fail("no child table `order_lines`")
    listing = "[" + ", ".join(quote(p) for p in files["order_lines"]) + "]"
    (lines,) = con.execute(f"SELECT count(*) FROM read_parquet({listing})").fetchone()
    duck = os.path.join(duckdb_out, "Order.parquet")
    (want,) = con.execute(f"SELECT coalesce(sum(len(lines)), 0) FROM read_parquet({quote(duck)})").fetchone()
    if lines != want:
        fail(f"`order_lines` has {lines} rows, the orders' `lines` lists {want} elements")
    ok(f"`order_lines`: {lines} rows, one per element of the orders' `lines`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
