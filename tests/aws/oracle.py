"""An oracle for the AWS tests that shares no code with etl: the tables an unwind must give,
computed from the items themselves, compared with what pyarrow and DuckDB read from etl's output.

Usage:
  oracle.py ENDPOINT tables SOURCE OUT_DIR [--type-attribute NAME]
  oracle.py ENDPOINT count SOURCE

SOURCE says where the items come from, read here with boto3 or the standard library only:
  table:TABLE          a paginated low-level `Scan` of the table (what boto3 reads out of moto)
  s3:BUCKET/PREFIX     every data file under the prefix (`*.json.gz`, `*.gz`, `*.json` lines of
                       `{"Item": ...}`, not manifests), fetched with boto3
  scan-json:FILE       `aws dynamodb scan --output json` output (one or several documents)
  files:DIR            every data file below a local folder (an export as it was uploaded)

`tables` applies the README's unmapped rules, written here from scratch: an item goes to the
table named after its type attribute in snake case (`OrderItem` -> `order_item`), or to
`_untyped` without one; each attribute is a column. Expected rows are matched to the output's
rows by (PK, SK) and compared cell by cell, guided by the source value: `N` by `decimal.Decimal`
value (an int64, a decimal or decimal text cell), `S`, `BOOL`, `B` exactly, sets as multisets,
`L` and `M` element by element (as a typed list or struct, or parsed from JSON text),
`NULL` and a missing attribute as null; a column that holds several DynamoDB types holds
DynamoDB JSON text, parsed and compared with the source value. Column types are checked where
the README fixes them (`S`, `B`, `BOOL`, sets, `N` as int64 or decimal(38, s) with s the largest
scale). The whole comparison runs twice: on pyarrow's reading and on DuckDB's.
Prints one JSON object (tables, rows and cells compared); on any difference, lists the first
ones on stderr and exits 1.

`count` prints {"items": N, "tables": {table: rows}} for the source.

  oracle.py ENDPOINT sql SOURCE NAME=ANSWER_JSON...

computes the answers of the library queries NAME (`sql/NAME.sql`: revenue_by_month,
top_customers_by_lifetime_value, revenue_by_category, products_never_ordered) from the source
items in plain Python (`decimal` sums, UTC months from epoch seconds), and compares them, row by
row and in order, with `etl sql --format json` answers saved in ANSWER_JSON (numbers compared as
Decimals). Prints {NAME: rows}; exit 1 on any difference.
"""
import argparse
import base64
import decimal
import glob
import gzip
import json
import os
import re
import sys
from collections import Counter, defaultdict
from decimal import Decimal

decimal.getcontext().prec = 200
decimal.getcontext().Emax = 999999
decimal.getcontext().Emin = -999999

MAX_DIFFS = 20


# --- Items -----------------------------------------------------------------------------------


def _wire_to_file(av):
    """A boto3 low-level AttributeValue (bytes for B) as the file form (base64 for B)."""
    (tag, v), = av.items()
    if tag == "B":
        return {"B": base64.b64encode(bytes(v)).decode()}
    if tag == "BS":
        return {"BS": [base64.b64encode(bytes(x)).decode() for x in v]}
    if tag == "L":
        return {"L": [_wire_to_file(x) for x in v]}
    if tag == "M":
        return {"M": {k: _wire_to_file(x) for k, x in v.items()}}
    return {tag: v}


def items_from_table(endpoint, table):
    import awsutil

    ddb = awsutil.client(endpoint, "dynamodb")
    out, start = [], None
    while True:
        kw = {"TableName": table, **({"ExclusiveStartKey": start} if start else {})}
        page = ddb.scan(**kw)
        out.extend({k: _wire_to_file(v) for k, v in it.items()} for it in page.get("Items", []))
        start = page.get("LastEvaluatedKey")
        if not start:
            return out


def _lines_items(text):
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)["Item"]


def items_from_s3(endpoint, spec):
    import awsutil

    bucket, _, prefix = spec.partition("/")
    s3 = awsutil.client(endpoint, "s3")
    out = []
    for key, _ in awsutil.list_keys(s3, bucket, prefix):
        name = key.rsplit("/", 1)[-1]
        if name.startswith("manifest-") or not name.endswith((".json.gz", ".gz", ".json")):
            continue
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        if name.endswith(".gz"):
            body = gzip.decompress(body)
        out.extend(_lines_items(body.decode("utf-8")))
    return out


def items_from_scan_json(path):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    dec, pos, out = json.JSONDecoder(), 0, []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            return out
        doc, pos = dec.raw_decode(text, pos)
        out.extend(doc["Items"])


def items_from_files(root):
    out = []
    for d, _, names in sorted(os.walk(root)):
        for n in sorted(names):
            if n.startswith("manifest-") or not n.endswith((".json.gz", ".gz", ".json")):
                continue
            with open(os.path.join(d, n), "rb") as fh:
                body = fh.read()
            if n.endswith(".gz"):
                body = gzip.decompress(body)
            out.extend(_lines_items(body.decode("utf-8")))
    return out


def load_items(endpoint, source):
    kind, _, rest = source.partition(":")
    if kind == "table":
        return items_from_table(endpoint, rest)
    if kind == "s3":
        return items_from_s3(endpoint, rest)
    if kind == "scan-json":
        return items_from_scan_json(rest)
    if kind == "files":
        return items_from_files(rest)
    sys.exit(f"unknown SOURCE {source!r}")


def table_name(type_value):
    """`OrderItem` -> `order_item`, `User` -> `user` (README: one folder per entity)."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", type_value)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
    return s.lower()


def route(items, type_attr):
    tables = defaultdict(list)
    for it in items:
        t = it.get(type_attr)
        name = table_name(t["S"]) if t is not None and "S" in t else "_untyped"
        tables[name].append(it)
    return tables


# --- Comparing one cell with its source value -------------------------------------------------


def num(x):
    """A reader's number cell (int, Decimal, float-free) or decimal text, as a Decimal."""
    if isinstance(x, bool):
        raise ValueError("bool is not a number")
    if isinstance(x, (int, Decimal)):
        return Decimal(x)
    if isinstance(x, str):
        return Decimal(x)
    raise ValueError(f"not a number cell: {x!r}")


def as_bytes(x):
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    raise ValueError(f"not a binary cell: {x!r}")


def parse_json_text(x):
    if not isinstance(x, str):
        raise ValueError(f"expected JSON text, got {x!r}")
    return json.loads(x, parse_float=Decimal, parse_int=Decimal)


def match_av_json(av, j):
    """Whether `j` (parsed JSON, numbers as Decimal) is `av` written as DynamoDB JSON."""
    (tag, v), = av.items()
    if not isinstance(j, dict) or list(j) != [tag]:
        return False
    w = j[tag]
    if tag == "N":
        return Decimal(str(w)) == Decimal(v)
    if tag in ("S", "B"):
        return w == v if tag == "S" else base64.b64decode(w) == base64.b64decode(v)
    if tag == "BOOL":
        return w is v or w == v
    if tag == "NULL":
        return w is True or w == True  # noqa: E712
    if tag == "SS":
        return sorted(w) == sorted(v)
    if tag == "NS":
        return sorted(Decimal(str(x)) for x in w) == sorted(Decimal(x) for x in v)
    if tag == "BS":
        return sorted(base64.b64decode(x) for x in w) == sorted(base64.b64decode(x) for x in v)
    if tag == "L":
        return isinstance(w, list) and len(w) == len(v) and all(match_av_json(a, b) for a, b in zip(v, w))
    if tag == "M":
        return isinstance(w, dict) and set(w) == set(v) and all(match_av_json(v[k], w[k]) for k in v)
    return False


def match_plain_json(av, j):
    """Whether `j` is `av` as plain JSON (a list or map written as JSON text without type tags);
    accepted only where the tagged form does not apply."""
    (tag, v), = av.items()
    if tag == "N":
        return isinstance(j, Decimal) and j == Decimal(v) or isinstance(j, str) and Decimal(j) == Decimal(v)
    if tag == "S":
        return j == v
    if tag == "BOOL":
        return j is v
    if tag == "NULL":
        return j is None
    if tag == "B":
        return isinstance(j, str) and base64.b64decode(j) == base64.b64decode(v)
    if tag == "L":
        return isinstance(j, list) and len(j) == len(v) and all(match_cell_json(a, b) for a, b in zip(v, j))
    if tag == "M":
        return isinstance(j, dict) and set(j) == set(v) and all(match_cell_json(v[k], j[k]) for k in v)
    if tag in ("SS", "NS", "BS"):
        return isinstance(j, list) and match_set(tag, v, j)
    return False


def match_cell_json(av, j):
    return match_av_json(av, j) or match_plain_json(av, j)


def match_set(tag, v, cell):
    if tag == "SS":
        return sorted(cell) == sorted(v)
    if tag == "NS":
        return sorted(num(x) for x in cell) == sorted(Decimal(x) for x in v)
    return sorted(as_bytes(x) for x in cell) == sorted(base64.b64decode(x) for x in v)


def match(av, cell, mixed):
    """Whether a reader's `cell` holds the source value `av` (None: absent)."""
    if av is None or "NULL" in av:
        return cell is None
    if cell is None:
        return False
    if mixed:
        return match_av_json(av, parse_json_text(cell))
    (tag, v), = av.items()
    try:
        if tag == "S":
            return cell == v
        if tag == "N":
            return num(cell) == Decimal(v)
        if tag == "BOOL":
            return cell is v
        if tag == "B":
            return as_bytes(cell) == base64.b64decode(v)
        if tag in ("SS", "NS", "BS"):
            return isinstance(cell, list) and match_set(tag, v, cell)
        if tag == "L":
            if isinstance(cell, str):
                return match_cell_json(av, parse_json_text(cell))
            return isinstance(cell, list) and len(cell) == len(v) and all(match(a, c, False) for a, c in zip(v, cell))
        if tag == "M":
            if isinstance(cell, str):
                return match_cell_json(av, parse_json_text(cell))
            if not isinstance(cell, dict):
                return False
            # A struct has every name seen in the column; the ones this item lacks are null.
            if not set(v) <= set(cell):
                return False
            return all(match(v.get(k), cell[k], False) for k in cell)
    except (ValueError, TypeError, decimal.InvalidOperation, json.JSONDecodeError):
        return False
    return False


# --- Expected column types --------------------------------------------------------------------


def scale(text):
    """Digits after the point of the number's canonical form: DynamoDB (and etl) drop trailing
    zeros, so `0.190` has scale 2."""
    d = Decimal(text).normalize()
    e = d.as_tuple().exponent
    return max(0, -e)


def expected_type(tags, values):
    """The README's type for a column whose non-null values have DynamoDB types `tags`, or
    None where the README leaves a choice to the data (L, M) or the value is out of reach."""
    if len(tags) > 1:
        return "string"  # DynamoDB JSON text
    (tag,) = tags
    simple = {"S": "string", "B": "binary", "BOOL": "bool", "SS": "list<string>", "BS": "list<binary>"}
    if tag in simple:
        return simple[tag]
    if tag == "N":
        ds = [Decimal(v["N"]) for v in values]
        if all(d == d.to_integral_value() and -(2**63) <= d < 2**63 for d in ds):
            return "int64"
        s = max(scale(v["N"]) for v in values)
        if all(len(d.quantize(Decimal(1).scaleb(-s)).as_tuple().digits) <= 38 for d in ds) and s <= 38:
            return f"decimal(38,{s})"
        return None  # decimal text: checked through the values
    return None


# --- Readers ----------------------------------------------------------------------------------


def parts(out, table):
    files = sorted(glob.glob(os.path.join(out, table, "*.parquet")))
    if not files:
        raise SystemExit(f"no Parquet files in {os.path.join(out, table)}")
    return files


def arrow_type_text(t):
    import pyarrow as pa

    if pa.types.is_int64(t):
        return "int64"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{arrow_type_text(t.value_type)}>"
    return str(t)


def read_pyarrow(out, table):
    import pyarrow.parquet as pq

    tables = [pq.read_table(f) for f in parts(out, table)]
    schema = tables[0].schema
    rows = [r for t in tables for r in t.to_pylist()]
    types = {f.name: arrow_type_text(f.type) for f in schema}
    return rows, types


def read_duckdb(out, table):
    import duckdb

    con = duckdb.connect()
    files = parts(out, table)
    rel = con.sql("SELECT * FROM read_parquet(?)", params=[files])
    cols = rel.columns
    rows = [dict(zip(cols, r)) for r in rel.fetchall()]
    return rows, None


def compare(expected_tables, out, reader, type_attr):
    diffs, cells, rows_seen, typed = [], 0, 0, 0
    got_tables = sorted(
        n for n in os.listdir(out) if n not in ("_etl", "_rejects") and not n.startswith(".")
    )
    if got_tables != sorted(expected_tables):
        diffs.append(f"tables: got {got_tables}, expected {sorted(expected_tables)}")
    for name, items in sorted(expected_tables.items()):
        if name not in got_tables:
            continue
        rows, types = reader(out, name)
        rows_seen += len(rows)
        if len(rows) != len(items):
            diffs.append(f"{name}: {len(rows)} rows, expected {len(items)}")
        columns = sorted({k for it in items for k in it})
        got_cols = sorted(rows[0]) if rows else []
        if rows and got_cols != columns:
            diffs.append(f"{name}: columns {got_cols}, expected {columns}")
        tags = defaultdict(set)
        values = defaultdict(list)
        for it in items:
            for k, v in it.items():
                (tag,) = v
                if tag != "NULL":
                    tags[k].add(tag)
                    values[k].append(v)
        if types is not None:
            for c in columns:
                want = expected_type(tags[c], values[c]) if tags[c] else None
                typed += want is not None
                if want is not None and types.get(c) != want:
                    diffs.append(f"{name}.{c}: type {types.get(c)}, expected {want} (values of {sorted(tags[c])})")
        by_key = defaultdict(list)
        for r in rows:
            by_key[(r.get("PK"), r.get("SK"))].append(r)
        want_keys = Counter((it.get("PK", {}).get("S"), it.get("SK", {}).get("S")) for it in items)
        if any(n > 1 for n in want_keys.values()):
            diffs.append(f"{name}: the source repeats a (PK, SK) key; this oracle matches rows by key")
        for it in items:
            key = (it.get("PK", {}).get("S"), it.get("SK", {}).get("S"))
            found = by_key.get(key) or []
            if len(found) != 1:
                diffs.append(f"{name}: {len(found)} rows with key {key}")
                continue
            row = found[0]
            for c in columns:
                if c not in row:
                    continue
                cells += 1
                if not match(it.get(c), row[c], len(tags[c]) > 1):
                    diffs.append(f"{name} {key} .{c}: cell {row[c]!r}, source {it.get(c)!r}")
    return diffs, cells, rows_seen, typed


# --- SQL answers computed from the items -----------------------------------------------------


def _s(it, k):
    v = it.get(k)
    return None if v is None or "NULL" in v else v.get("S")


def _n(it, k):
    v = it.get(k)
    return None if v is None or "NULL" in v else Decimal(v["N"])


def _month(epoch_s):
    import datetime

    return datetime.datetime.fromtimestamp(int(epoch_s), tz=datetime.timezone.utc).strftime("%Y-%m")


def answers(tables):
    orders = [o for o in tables.get("order", []) if _s(o, "status") != "cancelled"]
    out = {}

    by_month = defaultdict(lambda: [0, Decimal(0)])
    for o in orders:
        m = by_month[_month(_n(o, "ordered_at"))]
        m[0] += 1
        m[1] += _n(o, "total")
    out["revenue_by_month"] = [
        {"month": k, "orders": v[0], "revenue": v[1]} for k, v in sorted(by_month.items())
    ]

    users = {_s(u, "email"): _s(u, "name") for u in tables.get("user", [])}
    by_user = defaultdict(lambda: [0, Decimal(0)])
    for o in orders:
        email = _s(o, "PK").split("#")[1]
        if email in users:
            by_user[email][0] += 1
            by_user[email][1] += _n(o, "total")
    top = sorted(by_user.items(), key=lambda kv: (-kv[1][1], kv[0]))[:10]
    out["top_customers_by_lifetime_value"] = [
        {"email": e, "name": users[e], "orders": v[0], "lifetime_value": v[1]} for e, v in top
    ]

    category = {_s(p, "sku"): _s(p, "category") for p in tables.get("product", [])}
    live = {_s(o, "order_id") for o in orders}
    by_cat = defaultdict(lambda: [set(), Decimal(0), Decimal(0)])
    for oi in tables.get("order_item", []):
        sku, oid = _s(oi, "sku"), _s(oi, "order_id")
        if sku in category and oid in live:
            c = by_cat[category[sku]]
            c[0].add(oid)
            c[1] += _n(oi, "quantity")
            c[2] += _n(oi, "quantity") * _n(oi, "unit_price")
    rows = sorted(by_cat.items(), key=lambda kv: (-kv[1][2], kv[0]))
    out["revenue_by_category"] = [
        {"category": k, "orders": len(v[0]), "units": v[1], "revenue": v[2]} for k, v in rows
    ]

    ordered = {_s(oi, "sku") for oi in tables.get("order_item", [])}
    never = sorted((p for p in tables.get("product", []) if _s(p, "sku") not in ordered), key=lambda p: _s(p, "sku"))
    out["products_never_ordered"] = [
        {"sku": _s(p, "sku"), "name": _s(p, "name"), "category": _s(p, "category"), "stock": _n(p, "stock")}
        for p in never
    ]
    return out


def same_answer(want, got):
    if isinstance(want, (int, Decimal)) and not isinstance(want, bool):
        return isinstance(got, (int, Decimal)) and not isinstance(got, bool) and Decimal(got) == Decimal(want)
    return want == got


def compare_answers(expected, name, path):
    with open(path, encoding="utf-8") as fh:
        got = json.loads(fh.read() or "[]", parse_float=Decimal, parse_int=Decimal)
    want = expected[name]
    diffs = []
    if len(got) != len(want):
        diffs.append(f"{name}: {len(got)} rows, expected {len(want)}")
    for i, (w, g) in enumerate(zip(want, got)):
        if sorted(w) != sorted(g):
            diffs.append(f"{name} row {i}: columns {sorted(g)}, expected {sorted(w)}")
        elif not all(same_answer(w[k], g[k]) for k in w):
            diffs.append(f"{name} row {i}: {g}, expected {w}")
    return len(want), diffs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("endpoint")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("tables")
    p.add_argument("source")
    p.add_argument("out")
    p.add_argument("--type-attribute", default="Type")
    p = sub.add_parser("sql")
    p.add_argument("source")
    p.add_argument("answers", nargs="+", metavar="NAME=ANSWER_JSON")
    p.add_argument("--type-attribute", default="Type")
    p = sub.add_parser("count")
    p.add_argument("source")
    p.add_argument("--type-attribute", default="Type")
    a = ap.parse_args()
    items = load_items(a.endpoint, a.source)
    tables = route(items, a.type_attribute)
    if a.cmd == "count":
        print(json.dumps({"items": len(items), "tables": {k: len(v) for k, v in sorted(tables.items())}}))
        return
    if a.cmd == "sql":
        expected, report, failed = answers(tables), {}, False
        for spec in a.answers:
            name, _, path = spec.partition("=")
            if name not in expected:
                sys.exit(f"no independent computation for query {name!r}")
            report[name], diffs = compare_answers(expected, name, path)
            for d in diffs[:MAX_DIFFS]:
                failed = True
                print(f"  {d}", file=sys.stderr)
        print(json.dumps(report))
        sys.exit(1 if failed else 0)
    report = {"items": len(items), "tables": {k: len(v) for k, v in sorted(tables.items())}}
    failed = False
    for label, reader in (("pyarrow", read_pyarrow), ("duckdb", read_duckdb)):
        diffs, cells, rows, typed = compare(tables, a.out, reader, a.type_attribute)
        report[label] = {"rows": rows, "cells": cells, "types": typed, "differences": len(diffs)}
        if diffs:
            failed = True
            print(f"{label}: {len(diffs)} differences from the source items; the first ones:", file=sys.stderr)
            for d in diffs[:MAX_DIFFS]:
                print(f"  {d}", file=sys.stderr)
    print(json.dumps(report))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
