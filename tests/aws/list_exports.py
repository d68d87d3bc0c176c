"""Prints a table's exports as JSON: [{"ExportArn", "ExportStatus", "ExportType"}, ...].

Usage: list_exports.py ENDPOINT TABLE [--bucket BUCKET]

With `--bucket`, only the exports written to that bucket: tests share one table and run at the
same time, so a test counts the exports it started by its own bucket, not by the table.
"""
import argparse
import json

import awsutil


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("endpoint")
    ap.add_argument("table")
    ap.add_argument("--bucket")
    a = ap.parse_args()
    ddb = awsutil.client(a.endpoint, "dynamodb")
    arn = ddb.describe_table(TableName=a.table)["Table"]["TableArn"]
    out, token = [], None
    while True:
        kw = {"TableArn": arn, **({"NextToken": token} if token else {})}
        r = ddb.list_exports(**kw)
        out.extend(r.get("ExportSummaries", []))
        token = r.get("NextToken")
        if not token:
            break
    if a.bucket is not None:
        out = [e for e in out if ddb.describe_export(ExportArn=e["ExportArn"])["ExportDescription"].get("S3Bucket") == a.bucket]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
