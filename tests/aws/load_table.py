"""Creates a DynamoDB table and loads the items of a local export into it.

Usage: load_table.py ENDPOINT TABLE [EXPORT_DIR] [--pitr]

The table has string keys PK (hash) and SK (range) and on-demand billing. Items come from every
data file below EXPORT_DIR (`*.json.gz`, `*.gz`, `*.json`: DynamoDB JSON lines `{"Item":{...}}`),
in file name order, written with the low-level client's batch_write_item, which takes DynamoDB
JSON as it is except that B values and BS members must be bytes (they are base64 in the files);
numbers stay strings, so they reach the table exactly as written. Without EXPORT_DIR the table
stays empty. --pitr also turns on point-in-time recovery (needed for exports).
Prints the number of items written.
"""
import argparse
import base64
import gzip
import json
import os
import sys
import time

import awsutil


def to_wire(value):
    """One AttributeValue from the file form to what boto3's low-level client takes."""
    (tag, v), = value.items()
    if tag == "B":
        return {"B": base64.b64decode(v, validate=True)}
    if tag == "BS":
        return {"BS": [base64.b64decode(x, validate=True) for x in v]}
    if tag == "L":
        return {"L": [to_wire(x) for x in v]}
    if tag == "M":
        return {"M": {k: to_wire(x) for k, x in v.items()}}
    return {tag: v}


def data_files(root):
    out = []
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith((".json.gz", ".gz", ".json")) and not n.startswith("manifest-"):
                out.append(os.path.join(d, n))
    return sorted(out)


def read_items(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)["Item"]


def create_table(ddb, table):
    ddb.create_table(
        TableName=table,
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        BillingMode="PAY_PER_REQUEST",
    )
    deadline = time.monotonic() + 30
    while ddb.describe_table(TableName=table)["Table"]["TableStatus"] != "ACTIVE":
        if time.monotonic() > deadline:
            sys.exit(f"table {table} did not become ACTIVE within 30 s")
        time.sleep(0.1)


def write_all(ddb, table, items):
    written = 0
    for i in range(0, len(items), 25):
        pending = {table: [{"PutRequest": {"Item": it}} for it in items[i : i + 25]]}
        for attempt in range(20):
            r = ddb.batch_write_item(RequestItems=pending)
            pending = r.get("UnprocessedItems") or {}
            if not pending:
                break
            time.sleep(0.05 * (attempt + 1))
        else:
            sys.exit(f"batch_write_item kept returning unprocessed items for {table}")
        written += len(items[i : i + 25])
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("endpoint")
    ap.add_argument("table")
    ap.add_argument("export_dir", nargs="?")
    ap.add_argument("--pitr", action="store_true", help="turn on point-in-time recovery")
    a = ap.parse_args()
    ddb = awsutil.client(a.endpoint, "dynamodb")
    create_table(ddb, a.table)
    if a.pitr:
        ddb.update_continuous_backups(
            TableName=a.table, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
        )
    items = []
    if a.export_dir:
        files = data_files(a.export_dir)
        if not files:
            sys.exit(f"no data files below {a.export_dir}")
        for f in files:
            items.extend(to_wire_item(it) for it in read_items(f))
    print(write_all(ddb, a.table, items))


def to_wire_item(item):
    return {k: to_wire(v) for k, v in item.items()}


if __name__ == "__main__":
    main()
