"""An oracle that shares no code with etl: reads the output of tests/mappings/every-type.toml with
pyarrow and DuckDB and checks every table, column type and value against expectations computed
here from the source items and the documented rules (mappings/README.md).

Usage: every_type.py OUT_DIR ITEMS_JSONL
ITEMS_JSONL holds the export's lines (`{"Item": {...}}`, DynamoDB JSON), in export order.
Prints {"tables": {name: {"rows": n, "cells": n}}} on stdout, where `cells` counts the values
compared (both readers); exits 1 listing every mismatch on stderr.

Numbers are read with Python's `decimal`, binary decoded with `base64`, JSON-text columns parsed
with `json` and compared by meaning (numbers by value, sets unordered), timestamps built with
`datetime` from the epoch or parsed with `datetime.fromisoformat`/`strptime`.
"""
import base64
import datetime as dt
import decimal
import json
import re
import sys

import duckdb
import pyarrow.parquet as pq

from cells import D, dyn, same

decimal.getcontext().prec = 200
UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
I64 = (-(2**63), 2**63 - 1)


class Unfit(Exception):
    """The item cannot be a row: the documented rules send it to `_rejects`."""


# ---- expected values, from DynamoDB JSON -------------------------------------------------------


def number(v):
    if set(v) != {"N"}:
        raise Unfit(f"not an N: {v}")
    n = D(v["N"])
    # What DynamoDB can hold: 38 significant digits, magnitudes 1E-130 to below 1E+126.
    if n != 0 and (len(n.normalize().as_tuple().digits) > 38 or not D("1E-130") <= abs(n) < D("1E+126")):
        raise Unfit(f"{n} is not a DynamoDB number")
    return n


def integral(n):
    if n != n.to_integral_value():
        raise Unfit(f"{n} is not integral")
    i = int(n)
    if not I64[0] <= i <= I64[1]:
        raise Unfit(f"{i} beyond int64")
    return i


def k_int(v):
    return integral(number(v))


def k_dec(precision, scale):
    def conv(v):
        n = number(v)
        q = n.quantize(D(1).scaleb(-scale))
        if q != n or len(q.as_tuple().digits) > precision and q != 0:
            raise Unfit(f"{n} does not fit decimal({precision},{scale})")
        return ("dec", scale, n)

    return conv


def k_dectext(v):
    return ("dectext", number(v))


def k_float(v):
    return float(number(v))


def k_str(v):
    return v["S"]


def k_bool(v):
    return v["BOOL"]


def k_bin(v):
    return base64.b64decode(v["B"], validate=True)


def k_epoch(per_second):
    def conv(v):
        i = k_int(v) if "N" in v else integral(D(v["S"]))
        return EPOCH + dt.timedelta(microseconds=i * (1_000_000 // per_second))

    return conv


def offset(tz):
    if tz == "UTC":
        return UTC
    sign = -1 if tz[0] == "-" else 1
    h, m = tz[1:].split(":")
    return dt.timezone(sign * dt.timedelta(hours=int(h), minutes=int(m)))


def k_iso(tz="UTC"):
    def conv(v):
        t = dt.datetime.fromisoformat(v["S"])
        return t if t.tzinfo else t.replace(tzinfo=offset(tz))

    return conv


def k_pattern(p, tz):
    def conv(v):
        return dt.datetime.strptime(v["S"], p).replace(tzinfo=offset(tz))

    return conv


def k_date(v):
    return dt.date.fromisoformat(v["S"])


def k_date_pattern(p):
    return lambda v: dt.datetime.strptime(v["S"], p).date()


def k_json(v):
    return ("json", dyn(v))


def k_list(elem):
    def conv(v):
        if set(v) != {"L"}:
            raise Unfit(f"not an L: {v}")
        return [elem(e) for e in v["L"]]

    return conv


def k_set(tag, elem):
    def conv(v):
        if set(v) != {tag}:
            raise Unfit(f"not an {tag}: {v}")
        wrap = {"SS": "S", "NS": "N", "BS": "B"}[tag]
        return ("set", [elem({wrap: e}) for e in v[tag]])

    return conv


def k_struct(fields):
    def conv(v):
        if set(v) != {"M"}:
            raise Unfit(f"not an M: {v}")
        extra = set(v["M"]) - set(fields)
        if extra:
            raise Unfit(f"struct has no field {extra}")
        return {name: value(v["M"].get(name), f) for name, f in fields.items()}

    return conv


def k_map(elem):
    def conv(v):
        if set(v) != {"M"}:
            raise Unfit(f"not an M: {v}")
        return ("map", {k: value(e, elem) for k, e in v["M"].items()})

    return conv


def value(v, conv):
    """Absent is null; so is NULL, except in a `json` column (lossless)."""
    if v is None or (v == {"NULL": True} and conv is not k_json):
        return None
    return conv(v)


# ---- the mapping, as documented: column -> (expected value, pyarrow type, DuckDB type) ---------

TS_S = ("timestamp[ms, tz=UTC]", "TIMESTAMP WITH TIME ZONE")  # Parquet has no seconds unit
TS_MS = TS_S
TS_US = ("timestamp[us, tz=UTC]", "TIMESTAMP WITH TIME ZONE")
GEO = k_struct({"lat": k_dec(9, 6), "lon": k_dec(9, 6)})
PLACE = k_struct({"city": k_str, "zip code": k_str, "seen_at": k_epoch(1), "geo": GEO})
PLACE_PA = (
    "struct<city: string, zip code: string, seen_at: timestamp[ms, tz=UTC], "
    "geo: struct<lat: decimal128(9, 6), lon: decimal128(9, 6)>>"
)
PLACE_DK = (
    'STRUCT(city VARCHAR, "zip code" VARCHAR, seen_at TIMESTAMP WITH TIME ZONE, '
    "geo STRUCT(lat DECIMAL(9,6), lon DECIMAL(9,6)))"
)

# Attribute-sourced columns of `things`, in mapping order after the key columns.
THINGS = {
    "qty_total": ("qty_total", k_int, "int64", "BIGINT"),
    "price": ("price", k_dec(12, 3), "decimal128(12, 3)", "DECIMAL(12,3)"),
    "big": ("big", k_dec(38, 0), "decimal128(38, 0)", "DECIMAL(38,0)"),
    "exact": ("exact", k_dectext, "string", "VARCHAR"),
    "ratio": ("ratio", k_float, "double", "DOUBLE"),
    "label": ("label", k_str, "string", "VARCHAR"),
    "display": ("Display Name", k_str, "string", "VARCHAR"),
    "flag": ("flag", k_bool, "bool", "BOOLEAN"),
    "blob": ("blob", k_bin, "binary", "BLOB"),
    "at_s": ("at_s", k_epoch(1), *TS_S),
    "at_ms": ("at_ms", k_epoch(1000), *TS_MS),
    "at_us": ("at_us", k_epoch(1_000_000), *TS_US),
    "at_iso": ("at_iso", k_iso(), *TS_US),
    "at_local": ("at_local", k_iso("+02:00"), *TS_US),
    "at_text": ("at_text", k_pattern("%d.%m.%Y %H:%M", "-05:30"), *TS_US),
    "day": ("day", k_date, "date32[day]", "DATE"),
    "day_text": ("day_text", k_date_pattern("%d.%m.%Y"), "date32[day]", "DATE"),
    "doc": ("doc", k_json, "string", "VARCHAR"),
    "counts": ("counts", k_list(k_int), "list<item: int64>", "BIGINT[]"),
    "moments": ("moments", k_list(k_epoch(1)), "list<item: timestamp[ms, tz=UTC]>", "TIMESTAMP WITH TIME ZONE[]"),
    "days": ("days", k_list(k_date), "list<item: date32[day]>", "DATE[]"),
    "nested": ("nested", k_list(k_list(k_str)), "list<item: list<item: string>>", "VARCHAR[][]"),
    "tags": ("tags", k_set("SS", k_str), "list<item: string>", "VARCHAR[]"),
    "sizes": ("sizes", k_set("NS", k_int), "list<item: int64>", "BIGINT[]"),
    "weights": ("weights", k_set("NS", k_dec(8, 2)), "list<item: decimal128(8, 2)>", "DECIMAL(8,2)[]"),
    "codes": ("codes", k_set("NS", k_dectext), "list<item: string>", "VARCHAR[]"),
    "blobs": ("blobs", k_set("BS", k_bin), "list<item: binary>", "BLOB[]"),
    "place": ("place", PLACE, PLACE_PA, PLACE_DK),
    "scores": ("scores", k_map(k_int), "map<string, int64>", "MAP(VARCHAR, BIGINT)"),
    "stamps": ("stamps", k_map(k_epoch(1)), "map<string, timestamp[ms, tz=UTC]>", "MAP(VARCHAR, TIMESTAMP WITH TIME ZONE)"),
    "props": ("props", k_map(k_json), "map<string, string>", "MAP(VARCHAR, VARCHAR)"),
}
PARTS = {
    "sku": ("sku", k_str, "string", "VARCHAR"),
    "qty": ("qty", k_int, "int64", "BIGINT"),
    "unit_price": ("unit_price", k_dec(10, 2), "decimal128(10, 2)", "DECIMAL(10,2)"),
    "shipped_at": ("shipped_at", k_epoch(1), *TS_S),
}
KEY_ATTRIBUTES = {"Type", "PK", "SK", "GSI1PK", "GSI1SK"}
# Attributes named like a key placeholder are copies of the key column, not kept in `_extra`.
PLACEHOLDERS = {"thing_id", "version", "made_at", "made_on", "stamped_at"}
EXTRA = ("string", "VARCHAR")


def keys(item):
    """The key columns, from the key attributes, parsed here by regular expressions."""
    pk = re.fullmatch(r"THING#(.+)", item["PK"]["S"])
    sk = re.fullmatch(r"V#(0|[1-9][0-9]*)#(0|[1-9][0-9]*)", item["SK"]["S"])
    day = re.fullmatch(r"DAY#(\d{4}-\d{2}-\d{2})", item["GSI1PK"]["S"])
    at = re.fullmatch(r"AT#(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)", item["GSI1SK"]["S"])
    if not (pk and sk and day and at):
        raise Unfit("a key does not match its template")
    return {
        "thing_id": pk[1],
        "version": int(sk[1]),
        "made_at": EPOCH + dt.timedelta(seconds=int(sk[2])),
        "made_on": dt.date.fromisoformat(day[1]),
        "stamped_at": dt.datetime.fromisoformat(at[1]),
    }


KEY_TYPES = {
    "thing_id": ("string", "VARCHAR"),
    "version": ("int64", "BIGINT"),
    "made_at": TS_S,
    "made_on": ("date32[day]", "DATE"),
    "stamped_at": TS_MS,
}


def extra(attrs):
    return ("json-item", {k: dyn(v) for k, v in attrs.items()}) if attrs else None


def expected(items):
    """Rows of `things` and `thing_parts` by their keys, and the 1-based lines of rejected items."""
    things, parts, rejected = {}, {}, []
    for line, item in enumerate(items, 1):
        try:
            if item.get("Type") != {"S": "Thing"}:
                raise Unfit("no entity takes this type")
            row = keys(item)
            for name, (source, conv, _, _) in THINGS.items():
                row[name] = value(item.get(source), conv)
            used = KEY_ATTRIBUTES | PLACEHOLDERS | {s for s, *_ in THINGS.values()} | {"parts"}
            row["_extra"] = extra({k: v for k, v in item.items() if k not in used})
            rows = []
            for pos, el in enumerate(item.get("parts", {"L": []})["L"]):
                fields = el["M"]
                if "sku" not in fields:
                    raise Unfit("required `sku` missing")
                prow = {"thing_id": row["thing_id"], "version": row["version"], "part_no": pos}
                for name, (source, conv, _, _) in PARTS.items():
                    prow[name] = value(fields.get(source), conv)
                prow["_extra"] = extra({k: v for k, v in fields.items() if k not in PARTS})
                rows.append(prow)
        except Unfit:
            rejected.append(line)
            continue
        things[row["thing_id"]] = row
        for prow in rows:
            parts[(prow["thing_id"], prow["part_no"])] = prow
    return things, parts, rejected


# ---- what the readers give, brought to the same terms ------------------------------------------


def read(con, out, table):
    """(pyarrow types, pyarrow rows, DuckDB types, DuckDB rows), rows as dicts in file order."""
    t = pq.read_table(f"{out}/{table}")
    # pyarrow names a map's entries after the column when reading Parquet and then prints that
    # name (`map<string, int64 ('scores')>`); the name is the reader's, not the file's.
    pa_types = {f.name: str(f.type).replace(f" ('{f.name}')>", ">") for f in t.schema}
    pa_rows = t.to_pylist()
    glob = f"{out}/{table}/*.parquet"
    dk_types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{glob}')").fetchall()}
    cur = con.execute(f"SELECT * FROM read_parquet('{glob}')")
    names = [d[0] for d in cur.description]
    dk_rows = [dict(zip(names, r)) for r in cur.fetchall()]
    return pa_types, pa_rows, dk_types, dk_rows


def check_table(con, out, table, spec, exp_rows, key, errors):
    """Types as each reader names them, then every value of every row. Returns cells compared."""
    pa_types, pa_rows, dk_types, dk_rows = read(con, out, table)
    want_pa = {c: t[0] for c, t in spec.items()}
    want_dk = {c: t[1] for c, t in spec.items()}
    if list(pa_types) != list(want_pa):
        errors.append(f"{table}: pyarrow columns {list(pa_types)}, expected {list(want_pa)}")
    if list(dk_types) != list(want_dk):
        errors.append(f"{table}: DuckDB columns {list(dk_types)}, expected {list(want_dk)}")
    for c in want_pa:
        if pa_types.get(c) != want_pa[c]:
            errors.append(f"{table}.{c}: pyarrow type {pa_types.get(c)!r}, expected {want_pa[c]!r}")
        if dk_types.get(c) != want_dk[c]:
            errors.append(f"{table}.{c}: DuckDB type {dk_types.get(c)!r}, expected {want_dk[c]!r}")
    cells = 0
    for reader, rows in (("pyarrow", pa_rows), ("duckdb", dk_rows)):
        got = {key(r): r for r in rows}
        if len(got) != len(rows) or set(got) != set(exp_rows):
            errors.append(f"{table} ({reader}): rows {sorted(got)}, expected {sorted(exp_rows)}")
            continue
        for k, exp in exp_rows.items():
            for c in spec:
                same(exp[c], got[k].get(c), f"{table}[{k}].{c} ({reader})", errors)
                cells += 1
    return len(pa_rows), cells


def main():
    out, items_path = sys.argv[1], sys.argv[2]
    with open(items_path, encoding="utf-8") as f:
        items = [json.loads(line)["Item"] for line in f if line.strip()]
    things, parts, rejected = expected(items)

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    errors = []
    with open(f"{out}/_etl/run.json", encoding="utf-8") as f:
        tables = sorted(t["name"] for t in json.load(f)["tables"])
    if tables != ["_rejects", "thing_parts", "things"]:
        errors.append(f"tables {tables}, expected _rejects, thing_parts, things")

    spec = dict(KEY_TYPES)
    spec.update({c: (pa, dk) for c, (_, _, pa, dk) in THINGS.items()})
    spec["_extra"] = EXTRA
    report = {}
    report["things"] = check_table(con, out, "things", spec, things, lambda r: r["thing_id"], errors)

    pspec = {"thing_id": KEY_TYPES["thing_id"], "version": KEY_TYPES["version"], "part_no": ("int64", "BIGINT")}
    pspec.update({c: (pa, dk) for c, (_, _, pa, dk) in PARTS.items()})
    pspec["_extra"] = EXTRA
    report["thing_parts"] = check_table(
        con, out, "thing_parts", pspec, parts, lambda r: (r["thing_id"], r["part_no"]), errors
    )

    # `_rejects`: one row per rejected item, naming its line; `raw` holds the item's line.
    rspec = {
        "source_file": ("string", "VARCHAR"),
        "line": ("int64", "BIGINT"),
        "byte_offset": ("int64", "BIGINT"),
        "reason": ("string", "VARCHAR"),
        "attribute": ("string", "VARCHAR"),
        "message": ("string", "VARCHAR"),
        "raw": ("string", "VARCHAR"),
        "raw_truncated": ("bool", "BOOLEAN"),
    }
    pa_types, pa_rows, dk_types, dk_rows = read(con, out, "_rejects")
    for c, (pa, dk) in rspec.items():
        if pa_types.get(c) != pa or dk_types.get(c) != dk:
            errors.append(f"_rejects.{c}: read as {pa_types.get(c)!r} / {dk_types.get(c)!r}, expected {pa} / {dk}")
    cells = 0
    for reader, rows in (("pyarrow", pa_rows), ("duckdb", dk_rows)):
        lines = sorted(r["line"] for r in rows)
        if lines != rejected:
            errors.append(f"_rejects ({reader}): lines {lines}, expected {rejected}")
        for r in rows:
            if 1 <= r["line"] <= len(items) and json.loads(r["raw"]) != {"Item": items[r["line"] - 1]}:
                errors.append(f"_rejects ({reader}) line {r['line']}: raw {r['raw']!r} is not that line's item")
            cells += 2
    report["_rejects"] = (len(pa_rows), cells)

    json.dump({"tables": {t: {"rows": n, "cells": c} for t, (n, c) in report.items()}}, sys.stdout)
    if errors:
        print(f"{len(errors)} mismatches:", *errors, sep="\n", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
