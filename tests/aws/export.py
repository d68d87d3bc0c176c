"""Exports a table to S3 with the server's ExportTableToPointInTime and prints where the data is.

Usage: export.py ENDPOINT TABLE BUCKET PREFIX [--timeout SECONDS]

Turns on point-in-time recovery, creates BUCKET when missing, starts a full DYNAMODB_JSON export
to s3://BUCKET/PREFIX, polls DescribeExport until it is COMPLETED (exit 1 with the failure code
and message when it FAILED), then lists the export's objects. moto 5.2.5 writes one bare data file,
`PREFIX/AWSDynamoDB/<uuid>/data/<uuid>.gz`, and no manifests, so this prints the data folder
`s3://BUCKET/PREFIX/AWSDynamoDB/<uuid>/data/` (a prefix of bare data files). Against a server that
writes manifests it prints the export folder `s3://BUCKET/PREFIX/AWSDynamoDB/<ExportId>/` instead.
"""
import argparse
import sys
import time

import awsutil


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("endpoint")
    ap.add_argument("table")
    ap.add_argument("bucket")
    ap.add_argument("prefix")
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    prefix = a.prefix.strip("/")
    if not prefix:
        sys.exit("a non-empty PREFIX is needed (moto answers HTTP 500 without one)")
    ddb = awsutil.client(a.endpoint, "dynamodb")
    s3 = awsutil.client(a.endpoint, "s3")
    ddb.update_continuous_backups(
        TableName=a.table, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
    )
    awsutil.ensure_bucket(s3, a.bucket)
    before = {k for k, _ in awsutil.list_keys(s3, a.bucket, prefix + "/")}
    arn = ddb.describe_table(TableName=a.table)["Table"]["TableArn"]
    d = ddb.export_table_to_point_in_time(
        TableArn=arn, S3Bucket=a.bucket, S3Prefix=prefix, ExportFormat="DYNAMODB_JSON"
    )["ExportDescription"]
    deadline = time.monotonic() + a.timeout
    while True:
        d = ddb.describe_export(ExportArn=d["ExportArn"])["ExportDescription"]
        if d["ExportStatus"] != "IN_PROGRESS":
            break
        if time.monotonic() > deadline:
            sys.exit(f"export {d['ExportArn']} still IN_PROGRESS after {a.timeout} s")
        time.sleep(0.2)
    if d["ExportStatus"] != "COMPLETED":
        sys.exit(f"export {d['ExportStatus']}: {d.get('FailureCode')}: {d.get('FailureMessage')}")
    new = sorted(k for k, _ in awsutil.list_keys(s3, a.bucket, prefix + "/") if k not in before)
    summaries = [k for k in new if k.endswith("/manifest-summary.json")]
    if summaries:
        folder = summaries[0].rsplit("/", 1)[0] + "/"
    else:
        data = [k for k in new if "/data/" in k]
        if not data:
            sys.exit(f"export COMPLETED but wrote nothing under s3://{a.bucket}/{prefix}/: {new}")
        folders = {k.rsplit("/", 1)[0] + "/" for k in data}
        if len(folders) != 1:
            sys.exit(f"export wrote data files in several folders: {sorted(folders)}")
        folder = folders.pop()
    print(f"s3://{a.bucket}/{folder}")


if __name__ == "__main__":
    main()
