#!/usr/bin/env python3
"""DuckDB baseline for `etl unwind`: the same job written as hand-tuned DuckDB SQL.

Reads the gzip JSON Lines data files of an `etl sample` export (DynamoDB JSON) with a
hand-written column schema (one STRUCT per attribute, holding the DynamoDB type wrapper), splits
the items by `Item.Type.S`, extracts typed columns per entity (numbers as DECIMAL(38, s) or
BIGINT, sets as lists, maps as structs, binary decoded with from_base64) and writes one Parquet
file per type with zstd. It knows the sample's schema in advance, which etl does not: that makes it
a generous baseline.

    python bench/duckdb_unwind.py --data 'EXPORT/AWSDynamoDB/*/data/*.json.gz' --out OUT_DIR

Prints one `<Type> <rows>` line per written table to stdout, timings to stderr.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import duckdb


def S() -> str:
    return 'STRUCT("S" VARCHAR)'


def N() -> str:
    return 'STRUCT("N" VARCHAR)'


def B() -> str:
    return 'STRUCT("B" VARCHAR)'


def BOOL() -> str:
    return 'STRUCT("BOOL" BOOLEAN)'


def SS() -> str:
    return 'STRUCT("SS" VARCHAR[])'


def NS() -> str:
    return 'STRUCT("NS" VARCHAR[])'


def BS() -> str:
    return 'STRUCT("BS" VARCHAR[])'


def fields(pairs: dict[str, str]) -> str:
    return ", ".join(f'"{name}" {ty}' for name, ty in pairs.items())


def M(pairs: dict[str, str]) -> str:
    return f'STRUCT("M" STRUCT({fields(pairs)}))'


def L(element: str) -> str:
    return f'STRUCT("L" {element}[])'


# Union of every attribute of every entity in the sample. A name shared by several entities
# (`status`, `tags`, `sku`, `name`, `order_id`) has the same DynamoDB type in each.
ITEM = {
    "PK": S(),
    "SK": S(),
    "Type": S(),
    # User
    "email": S(),
    "name": S(),
    "signup_at": N(),
    "status": S(),
    "StatusIndexPK": S(),
    "tags": SS(),
    "address": M({"street": S(), "city": S(), "zip": S(), "country": S()}),
    "avatar": B(),
    "verified": BOOL(),
    "phone": 'STRUCT("S" VARCHAR, "NULL" BOOLEAN)',
    "login_count": N(),
    "lifetime_points": N(),
    # Order
    "GSI1PK": S(),
    "GSI1SK": S(),
    "order_id": S(),
    "ordered_at": N(),
    "currency": S(),
    "total": N(),
    "item_count": N(),
    "shipping": M(
        {"method": S(), "cost": N(), "address": M({"city": S(), "country": S()})}
    ),
    "coupon_codes": SS(),
    "lines": L(M({"sku": S(), "qty": N(), "unit_price": N()})),
    "gift": BOOL(),
    # OrderItem
    "sku": S(),
    "quantity": N(),
    "unit_price": N(),
    "product_name": S(),
    # Product
    "category": S(),
    "price": N(),
    "stock": N(),
    "dimensions_cm": M({"w": N(), "h": N(), "d": N()}),
    "sizes": NS(),
    "thumbnail": B(),
    "images": BS(),
    "attributes": 'STRUCT("L" JSON)',  # heterogeneous list: kept as JSON text
    "weight_kg": N(),
    # Review
    "reviewer_email": S(),
    "rating": N(),
    "title": S(),
    "body": S(),
    "helpful_votes": N(),
    "verified_purchase": BOOL(),
    "reviewed_at": N(),
}


# The zstd level etl writes with (`ZSTD_LEVEL` in src/sink/parquet.rs): the same work on both sides.
ZSTD_LEVEL = 1


def dec(expr: str, scale: int) -> str:
    return f"CAST({expr} AS DECIMAL(38, {scale}))"


def big(expr: str) -> str:
    return f"CAST({expr} AS BIGINT)"


SELECTS = {
    "User": f"""
        i.PK.S AS pk, i.SK.S AS sk, i.email.S AS email, i.name.S AS name,
        {big('i.signup_at.N')} AS signup_at, i.status.S AS status,
        i.StatusIndexPK.S AS status_index_pk, list_sort(i.tags.SS) AS tags,
        {{'street': i.address.M.street.S, 'city': i.address.M.city.S,
          'zip': i.address.M.zip.S, 'country': i.address.M.country.S}} AS address,
        from_base64(i.avatar.B) AS avatar, i.verified.BOOL AS verified, i.phone.S AS phone,
        {big('i.login_count.N')} AS login_count,
        {dec('i.lifetime_points.N', 0)} AS lifetime_points""",
    "Order": f"""
        i.PK.S AS pk, i.SK.S AS sk, i.GSI1PK.S AS gsi1pk, i.GSI1SK.S AS gsi1sk,
        i.order_id.S AS order_id, {big('i.ordered_at.N')} AS ordered_at, i.status.S AS status,
        i.currency.S AS currency, {dec('i.total.N', 2)} AS total,
        {big('i.item_count.N')} AS item_count,
        {{'method': i.shipping.M.method.S, 'cost': {dec('i.shipping.M.cost.N', 2)},
          'address': {{'city': i.shipping.M.address.M.city.S,
                       'country': i.shipping.M.address.M.country.S}}}} AS shipping,
        list_sort(i.coupon_codes.SS) AS coupon_codes,
        list_transform(i.lines.L, lambda x: {{'sku': x.M.sku.S, 'qty': {big('x.M.qty.N')},
                                         'unit_price': {dec('x.M.unit_price.N', 2)}}}) AS lines,
        i.gift.BOOL AS gift""",
    "OrderItem": f"""
        i.PK.S AS pk, i.SK.S AS sk, i.order_id.S AS order_id, i.sku.S AS sku,
        {big('i.quantity.N')} AS quantity, {dec('i.unit_price.N', 2)} AS unit_price,
        i.product_name.S AS product_name""",
    "Product": f"""
        i.PK.S AS pk, i.SK.S AS sk, i.sku.S AS sku, i.name.S AS name,
        i.category.S AS category, {dec('i.price.N', 2)} AS price, {big('i.stock.N')} AS stock,
        {{'w': {dec('i.dimensions_cm.M.w.N', 1)}, 'h': {dec('i.dimensions_cm.M.h.N', 1)},
          'd': {dec('i.dimensions_cm.M.d.N', 1)}}} AS dimensions_cm,
        list_sort(i.tags.SS) AS tags,
        list_sort(list_transform(i.sizes.NS, lambda x: {big('x')})) AS sizes,
        from_base64(i.thumbnail.B) AS thumbnail,
        list_sort(list_transform(i.images.BS, lambda x: from_base64(x))) AS images,
        i.attributes.L AS attributes, {dec('i.weight_kg.N', 3)} AS weight_kg""",
    "Review": f"""
        i.PK.S AS pk, i.SK.S AS sk, i.sku.S AS sku, i.reviewer_email.S AS reviewer_email,
        {big('i.rating.N')} AS rating, i.title.S AS title, i.body.S AS body,
        {big('i.helpful_votes.N')} AS helpful_votes,
        i.verified_purchase.BOOL AS verified_purchase,
        {big('i.reviewed_at.N')} AS reviewed_at""",
}


def sql_string(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="glob of the export's data/*.json.gz files")
    ap.add_argument("--out", required=True, help="folder for <Type>.parquet (created)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--memory-limit", default=None, help="DuckDB memory_limit, e.g. 4GB")
    ap.add_argument(
        "--strategy",
        choices=["materialize", "rescan"],
        default="materialize",
        help="materialize: parse the JSON once into a temp table, then write each type from it; "
        "rescan: parse the JSON once per type (less memory, more CPU)",
    )
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    con = duckdb.connect(":memory:")
    con.execute(f"SET threads = {int(args.threads)}")
    spill = os.path.join(args.out, ".duckdb-tmp")
    con.execute(f"SET temp_directory = {sql_string(spill)}")
    con.execute("SET preserve_insertion_order = false")
    if args.memory_limit:
        con.execute(f"SET memory_limit = {sql_string(args.memory_limit)}")

    item_type = f"STRUCT({fields(ITEM)})"
    source = (
        f"read_ndjson({sql_string(args.data)}, columns = {{'Item': {sql_string(item_type)}}}, "
        "compression = 'gzip', maximum_object_size = 16777216)"
    )

    started = time.perf_counter()
    if args.strategy == "materialize":
        con.execute(f"CREATE TEMP TABLE raw AS SELECT Item.Type.S AS type, Item AS i FROM {source}")
        print(f"parse: {time.perf_counter() - started:.2f}s", file=sys.stderr)
        relation = "raw"
        type_expr = "type"
    else:
        relation = f"(SELECT Item AS i FROM {source})"
        type_expr = "i.Type.S"

    for entity, select in SELECTS.items():
        t = time.perf_counter()
        path = os.path.join(args.out, f"{entity}.parquet")
        con.execute(
            f"COPY (SELECT {select} FROM {relation} WHERE {type_expr} = {sql_string(entity)}) "
            f"TO {sql_string(path)} (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL {ZSTD_LEVEL})"
        )
        print(f"{entity}: {time.perf_counter() - t:.2f}s", file=sys.stderr)
    # The job's time, without Python's start-up and without the row counts below.
    print(f"total: {time.perf_counter() - started:.3f}s", file=sys.stderr)
    for entity in SELECTS:
        path = os.path.join(args.out, f"{entity}.parquet")
        rows = con.execute(f"SELECT count(*) FROM read_parquet({sql_string(path)})").fetchone()[0]
        print(f"{entity} {rows}")
    con.close()
    shutil.rmtree(spill, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
