"""An oracle for unmapped output that shares no code with etl: it reads the SOURCE data files
itself (gzip, json, Python's `decimal`), applies the documented unwind rules (README "Types" and
"Using it"; the rule details quoted below from `src/mapping/infer.rs` and
`src/normalize/naming.rs`) to compute every expected table, column, column type and cell, and
compares them with what pyarrow and DuckDB read from etl's output, cell by cell. JSON-text cells
are parsed and compared by meaning (numbers by value, sets unordered, binary decoded).

Usage: unmapped.py [--type-attribute NAME] [--by-key A,B] OUT_DIR SOURCE [OUT_DIR SOURCE]...
SOURCE is an export folder (`AWSDynamoDB/<id>`, files in `manifest-files.json` order) or a folder
of bare data files (`*.json.gz`/`*.json`, in name order). Several pairs are checked in one run
(the property test passes hundreds), each against its own output.
Prints {"outputs": [{"items": n, "tables": {name: {"rows", "cells", "columns": [[name, type]]}}}]}:
the types are the ones this oracle inferred (so the caller can hold them against hand-written
expectations); exits 1 listing every mismatch on stderr.
`--by-key A,B` compares an output whose rows and columns come in another order than SOURCE's (a
chain of incremental exports applied, against a full export of the final state): rows are
matched by the values of attributes A and B (an `S` each), columns by name; types and cells are
checked as always.

The rules, as documented:
- Routing: an item whose type attribute (`Type`) is an `S` goes to the table of that value; any
  other item (no type attribute, or not an `S`) goes to `_untyped`.
- Table names: ASCII letters and digits kept and lowercased, a `_` at each lower-to-upper or
  digit-to-upper change and before the last capital of a run followed by a lowercase letter
  (`HTTPRequest` -> `http_request`), every other run of characters one `_`, `_` trimmed at both
  ends, `t_` before a leading digit, `t_entity` when nothing is left; names longer than 96 bytes
  are cut and end in the first 8 hex digits of the value's MD5. Names taken twice get `_2`, `_3`
  ... in the sorted order of the type values.
- Columns: one per attribute, in the order attributes first appear (file, line, position in the
  item), names unique without regard to case (later ones get the lowest free `_2`, `_3`, ... that
  no attribute has). Beyond 1024 distinct attributes, only attributes present in at least 1% of
  the entity's items, and the 1024 most frequent, are columns; the rest go to an `_extra` column
  as one DynamoDB JSON item per row.
- Types: `N` int64 when every value is integral and fits, else decimal(38, s) with s the largest
  scale seen when the largest integer part plus s fits 38 digits, else exact decimal text; `S`
  string, `B` binary, `BOOL` bool; sets lists (metadata `SS`/`NS`/`BS`, NS members by the number
  rule); `L` a typed list when all elements (NULL aside) share one type (elements by the same
  rules), else JSON text, also when every list is empty; `M` a struct of the union of field names
  (sorted, fields by the same rules) when there are at most 64 names, none empty of names and no
  two differing only in case, else JSON text; only `NULL` seen: a null string column; several
  types (NULL aside): JSON text, each value as DynamoDB JSON.
- Cells: absent and `NULL` are null, except in JSON-text columns, where a `NULL` is the text
  `{"NULL":true}`.
"""
import base64
import decimal
import gzip
import hashlib
import json
import math
import os
import sys

import duckdb
import pyarrow.parquet as pq

from cells import dyn, num, same

decimal.getcontext().prec = 400
I64 = (-(2**63), 2**63 - 1)
MAX_STRUCT_FIELDS = 64
MAX_COLUMNS = 1024
MIN_SHARE_PERCENT = 1
MAX_TABLE_NAME = 96
# DynamoDB type keys in the order of their UTF-8 bytes.
TAGS = sorted(["S", "N", "B", "BOOL", "NULL", "SS", "NS", "BS", "L", "M"])


# ---- reading the source ------------------------------------------------------------------------


def data_files(source):
    manifest = os.path.join(source, "manifest-files.json")
    if os.path.exists(manifest):
        root = os.path.dirname(os.path.dirname(os.path.normpath(source)))
        with open(manifest, encoding="utf-8") as f:
            entries = [json.loads(line) for line in f if line.strip()]
        return [os.path.join(root, e["dataFileS3Key"]) for e in entries]
    names = sorted(n for n in os.listdir(source) if n.endswith((".json.gz", ".gz", ".json")))
    return [os.path.join(source, n) for n in names]


def read_items(source):
    """(file index, line, item) for every item, in file and line order."""
    out = []
    for fi, path in enumerate(data_files(source)):
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)  # reads every member of a multi-member file
        for ln, line in enumerate(raw.decode("utf-8").split("\n"), 1):
            if line.strip():
                out.append((fi, ln, json.loads(line)["Item"]))
    return out


# ---- numbers -----------------------------------------------------------------------------------


def digits_of(n):
    """(integer digits, scale) of a number written without exponent or trailing zeros."""
    n = abs(n)
    if n == 0:
        return 1, 0
    t = n.normalize().as_tuple()
    scale = max(0, -t.exponent)
    int_part = int(n)  # exact: prec is large
    return (len(str(int_part)) if int_part else 0), scale


def number_type(values):
    if all(v == v.to_integral_value() and I64[0] <= int(v) <= I64[1] for v in values):
        return ("int64",)
    pairs = [digits_of(v) for v in values]
    ints, scale = max(p[0] for p in pairs), max(p[1] for p in pairs)
    if ints + scale <= 38:
        return ("decimal", scale)
    return ("dectext",)


# ---- inference ---------------------------------------------------------------------------------


def tag_of(v):
    (tag,) = v.keys()
    return tag


def infer(values):
    """The column type for DynamoDB JSON `values` (absent ones left out)."""
    tags = sorted({tag_of(v) for v in values} - {"NULL"})
    if not tags:
        return ("null",)
    if len(tags) > 1:
        return ("json",)
    tag = tags[0]
    if tag == "S":
        return ("string",)
    if tag == "B":
        return ("binary",)
    if tag == "BOOL":
        return ("bool",)
    if tag == "N":
        return number_type([num(v["N"]) for v in values if "N" in v])
    if tag == "SS":
        return ("list", ("string",), "SS")
    if tag == "BS":
        return ("list", ("binary",), "BS")
    if tag == "NS":
        return ("list", number_type([num(m) for v in values if "NS" in v for m in v["NS"]]), "NS")
    if tag == "L":
        elements = [e for v in values if "L" in v for e in v["L"]]
        if not elements or len({tag_of(e) for e in elements} - {"NULL"}) > 1:
            return ("json",)
        return ("list", infer(elements), None)
    # M
    maps = [v["M"] for v in values if "M" in v]
    names = set()
    for m in maps:
        names.update(m)
    lowered = {n.lower() for n in names}
    if not names or len(names) > MAX_STRUCT_FIELDS or len(lowered) != len(names):
        return ("json",)
    return ("struct", [(n, infer([m[n] for m in maps if n in m])) for n in sorted(names)])


def seen(values):
    tags = {tag_of(v) for v in values}
    return tags - {"NULL"} or tags


def table_name(entity):
    out = []
    chars = list(entity)
    for i, c in enumerate(chars):
        if c.isascii() and c.isalnum():
            if c.isupper():
                prev = chars[i - 1] if i > 0 else None
                nxt = chars[i + 1] if i + 1 < len(chars) else None
                low = lambda x: x is not None and x.isascii() and x.islower()  # noqa: E731
                boundary = prev is not None and (
                    low(prev) or (prev.isascii() and prev.isdigit()) or (
                        prev.isascii() and prev.isupper() and low(nxt))
                )
                if boundary and out and out[-1] != "_":
                    out.append("_")
            out.append(c.lower())
        elif out and out[-1] != "_":
            out.append("_")
    name = "".join(out).strip("_")
    if not name:
        name = "t_entity"
    elif name[0].isdigit():
        name = "t_" + name
    if len(name) > MAX_TABLE_NAME:
        digest = hashlib.md5(entity.encode("utf-8")).hexdigest()
        name = name[: MAX_TABLE_NAME - 9].rstrip("_") + "_" + digest[:8]
    return name


def table_names(entities):
    used, out = set(), {}
    for e in sorted(entities, key=lambda s: s.encode("utf-8")):
        base = table_name(e)
        name, n = base, 2
        while name in used:
            name, n = f"{base}_{n}", n + 1
        used.add(name)
        out[e] = name
    return out


def unique(names):
    taken, everything, out = set(), {n.lower() for n in names}, []
    for name in names:
        if name.lower() not in taken:
            taken.add(name.lower())
            out.append(name)
            continue
        n = 2
        while f"{name}_{n}".lower() in everything or f"{name}_{n}".lower() in taken:
            n += 1
        taken.add(f"{name}_{n}".lower())
        out.append(f"{name}_{n}")
    return out


def expected_table(rows):
    """rows: [(file, line, item)] of one table -> (columns [(name, attribute, type, seen)], cells)."""
    first, count, values = {}, {}, {}
    for fi, ln, item in rows:
        for pos, (k, v) in enumerate(item.items()):
            first.setdefault(k, (fi, ln, pos))
            first[k] = min(first[k], (fi, ln, pos))
            count[k] = count.get(k, 0) + 1
            values.setdefault(k, []).append(v)
    attrs = list(first)
    demoted = []
    if len(attrs) > MAX_COLUMNS:
        floor = max(1, math.ceil(len(rows) * MIN_SHARE_PERCENT / 100))
        by_count = sorted(attrs, key=lambda a: (-count[a], first[a]))
        # Only a prefix of the frequency order: the first attribute under the floor ends it.
        keep = by_count[: next((i for i, a in enumerate(by_count[:MAX_COLUMNS]) if count[a] < floor), MAX_COLUMNS)]
        demoted = [a for a in attrs if a not in set(keep)]
        attrs = keep
    attrs.sort(key=lambda a: (first[a], a))
    columns = [(a, a, infer(values[a]), seen(values[a])) for a in attrs]
    if demoted:
        columns.append(("_extra", None, ("extra",), None))
    names = unique([c[0] for c in columns])
    columns = [(n,) + c[1:] for n, c in zip(names, columns)]
    demoted = set(demoted)
    cells = []
    for _, _, item in rows:
        row = []
        for _, attr, ty, _ in columns:
            if attr is None:
                kept = {k: v for k, v in item.items() if k in demoted}
                row.append(("json-item", {k: dyn(v) for k, v in kept.items()}) if kept else None)
            else:
                row.append(cell(item.get(attr), ty))
        cells.append(row)
    return columns, cells


# ---- expected cells ----------------------------------------------------------------------------


def number_cell(n, ty):
    if ty[0] == "int64":
        return int(n)
    if ty[0] == "decimal":
        return ("dec", ty[1], n)
    return ("dectext", n)


def cell(v, ty):
    if v is None:
        return None
    if ty[0] == "json":
        return ("json", dyn(v))
    if "NULL" in v:
        return None
    kind = ty[0]
    if kind == "string":
        return v["S"]
    if kind == "binary":
        return base64.b64decode(v["B"], validate=True)
    if kind == "bool":
        return v["BOOL"]
    if kind in ("int64", "decimal", "dectext"):
        return number_cell(num(v["N"]), ty)
    if kind == "list" and ty[2] == "SS":
        return ("set", list(v["SS"]))
    if kind == "list" and ty[2] == "BS":
        return ("set", [base64.b64decode(b, validate=True) for b in v["BS"]])
    if kind == "list" and ty[2] == "NS":
        return ("set", [number_cell(num(m), ty[1]) for m in v["NS"]])
    if kind == "list":
        return [cell(e, ty[1]) for e in v["L"]]
    if kind == "struct":
        return {name: cell(v["M"].get(name), fty) for name, fty in ty[1]}
    raise ValueError(f"a {tag_of(v)} value in a {ty} column")


# ---- types as the readers name them ------------------------------------------------------------


def pa_type(ty):
    kind = ty[0]
    if kind == "int64":
        return "int64"
    if kind == "decimal":
        return f"decimal128(38, {ty[1]})"
    if kind in ("dectext", "string", "json", "null", "extra"):
        return "string"
    if kind == "binary":
        return "binary"
    if kind == "bool":
        return "bool"
    if kind == "list":
        return f"list<item: {pa_type(ty[1])}>"
    return "struct<" + ", ".join(f"{n}: {pa_type(t)}" for n, t in ty[1]) + ">"


def dk_type(ty):
    kind = ty[0]
    if kind == "int64":
        return "BIGINT"
    if kind == "decimal":
        return f"DECIMAL(38,{ty[1]})"
    if kind in ("dectext", "string", "json", "null", "extra"):
        return "VARCHAR"
    if kind == "binary":
        return "BLOB"
    if kind == "bool":
        return "BOOLEAN"
    if kind == "list":
        return f"{dk_type(ty[1])}[]"
    return "STRUCT(" + ", ".join(f"{n} {dk_type(t)}" for n, t in ty[1]) + ")"


def label(ty):
    kind = ty[0]
    if kind == "decimal":
        return f"decimal(38,{ty[1]})"
    if kind == "list":
        return f"{'set' if ty[2] else 'list'}<{label(ty[1])}>"
    if kind == "struct":
        return "struct<" + ",".join(f"{n}:{label(t)}" for n, t in ty[1]) + ">"
    return kind


def meta_of(ty, seen_tags):
    """The documented `dynamodb.type` metadata: the types seen, and the encoding of text columns."""
    if ty[0] == "extra":
        return None
    enc = {"json": "dynamodb-json", "dectext": "decimal-text"}.get(ty[0])
    return (frozenset(seen_tags), enc)


def parse_meta(text):
    if text is None:
        return None
    parts = [p.strip() for p in text.split(";")]
    enc = next((p[len("encoding="):] for p in parts if p.startswith("encoding=")), None)
    return (frozenset(parts[0].split("|")), enc)


# ---- comparing ---------------------------------------------------------------------------------


def read(con, out, table):
    t = pq.read_table(f"{out}/{table}")
    pa = {f.name: (str(f.type), (f.metadata or {}).get(b"dynamodb.type")) for f in t.schema}
    glob = f"{out}/{table}/*.parquet"
    dk = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{glob}')").fetchall()}
    cur = con.execute(f"SELECT * FROM read_parquet('{glob}')")
    names = [d[0] for d in cur.description]
    return pa, t.to_pylist(), dk, [dict(zip(names, r)) for r in cur.fetchall()]


def check_output(con, out, source, type_attribute, errors, by_key=None):
    items = read_items(source)
    if by_key:
        items.sort(key=lambda r: tuple(r[2][k]["S"] for k in by_key))
    groups = {}
    for fi, ln, item in items:
        t = item.get(type_attribute)
        entity = t["S"] if isinstance(t, dict) and set(t) == {"S"} else None
        groups.setdefault(entity, []).append((fi, ln, item))
    names = table_names([e for e in groups if e is not None])
    names[None] = "_untyped"
    with open(f"{out}/_etl/run.json", encoding="utf-8") as f:
        listed = sorted(t["name"] for t in json.load(f)["tables"])
    want = sorted(list(names[e] for e in groups) + ["_rejects"])
    if listed != want:
        errors.append(f"{out}: tables {listed}, expected {want}")
    report = {}
    for entity, rows in groups.items():
        table = names[entity]
        where = f"{out}:{table}"
        columns, exp_rows = expected_table(rows)
        pa, pa_rows, dk, dk_rows = read(con, out, table)
        want_names = [c[0] for c in columns]
        if by_key:
            want_names = sorted(want_names)
            pa = dict(sorted(pa.items()))
            dk = dict(sorted(dk.items()))
            for got_rows in (pa_rows, dk_rows):
                got_rows.sort(key=lambda r: tuple(r[k] for k in by_key))
        if list(pa) != want_names or list(dk) != want_names:
            errors.append(f"{where}: columns pyarrow {list(pa)} / DuckDB {list(dk)}, expected {want_names}")
            continue
        for name, _, ty, seen_tags in columns:
            if pa[name][0] != pa_type(ty):
                errors.append(f"{where}.{name}: pyarrow type {pa[name][0]!r}, expected {pa_type(ty)!r}")
            # DuckDB quotes struct field names that are not plain identifiers; that is spelling.
            if dk[name].replace('"', "") != dk_type(ty):
                errors.append(f"{where}.{name}: DuckDB type {dk[name]!r}, expected {dk_type(ty)!r}")
            meta = pa[name][1]
            want_meta = meta_of(ty, seen_tags)
            if want_meta is not None and parse_meta(meta and meta.decode()) != want_meta:
                errors.append(f"{where}.{name}: metadata dynamodb.type {meta!r}, expected {want_meta}")
        cells = 0
        for reader, got_rows in (("pyarrow", pa_rows), ("duckdb", dk_rows)):
            if len(got_rows) != len(exp_rows):
                errors.append(f"{where} ({reader}): {len(got_rows)} rows, expected {len(exp_rows)}")
                continue
            # Rows in input order (file, then line): the documented determinism keeps it (or
            # both in key order, with `--by-key`).
            for i, (exp, got) in enumerate(zip(exp_rows, got_rows)):
                for (name, _, _, _), e in zip(columns, exp):
                    same(e, got.get(name), f"{where}[row {i}].{name} ({reader})", errors)
                    cells += 1
        report[table] = {
            "rows": len(pa_rows),
            "cells": cells,
            "columns": [[c[0], label(c[2])] for c in columns],
        }
    # Every item here is one DynamoDB can hold, so nothing is rejected.
    pa, pa_rows, dk, dk_rows = read(con, out, "_rejects")
    if pa_rows or dk_rows:
        errors.append(f"{out}: {len(pa_rows)} rejects, expected none: {pa_rows[:3]}")
    report["_rejects"] = {"rows": len(pa_rows), "cells": 0, "columns": []}
    return {"items": len(items), "tables": report}


def main():
    args = sys.argv[1:]
    type_attribute = "Type"
    by_key = None
    while args[:1] in (["--type-attribute"], ["--by-key"]):
        if args[0] == "--type-attribute":
            type_attribute = args[1]
        else:
            by_key = args[1].split(",")
        args = args[2:]
    if not args or len(args) % 2:
        sys.exit("usage: unmapped.py [--type-attribute NAME] [--by-key A,B] OUT_DIR SOURCE [OUT_DIR SOURCE]...")
    con = duckdb.connect()
    errors = []
    outputs = []
    for out, source in zip(args[::2], args[1::2]):
        outputs.append(check_output(con, out, source, type_attribute, errors, by_key))
    json.dump({"outputs": outputs}, sys.stdout)
    if errors:
        print(f"{len(errors)} mismatches:", *errors[:200], sep="\n", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
