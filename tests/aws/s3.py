"""Small S3 commands for assertions about what etl wrote.

Usage:
  s3.py ENDPOINT list BUCKET [PREFIX] [--json]   keys under PREFIX, one a line (--json: [[key, size]...])
  s3.py ENDPOINT get BUCKET KEY                  the object's bytes on stdout (exit 3 if missing)
  s3.py ENDPOINT put BUCKET KEY FILE             uploads FILE as KEY
  s3.py ENDPOINT delete BUCKET KEY...            deletes objects
  s3.py ENDPOINT mb BUCKET                       creates a bucket unless it exists
  s3.py ENDPOINT download BUCKET PREFIX DIR      every object under PREFIX into DIR/<key minus PREFIX>
  s3.py ENDPOINT uploads BUCKET [PREFIX]         multipart uploads still in progress, as JSON
"""
import argparse
import json
import os
import sys

import awsutil


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("endpoint")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("list")
    p.add_argument("bucket")
    p.add_argument("prefix", nargs="?", default="")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("get")
    p.add_argument("bucket")
    p.add_argument("key")
    p = sub.add_parser("put")
    p.add_argument("bucket")
    p.add_argument("key")
    p.add_argument("file")
    p = sub.add_parser("delete")
    p.add_argument("bucket")
    p.add_argument("keys", nargs="+")
    p = sub.add_parser("mb")
    p.add_argument("bucket")
    p = sub.add_parser("download")
    p.add_argument("bucket")
    p.add_argument("prefix")
    p.add_argument("dir")
    p = sub.add_parser("uploads")
    p.add_argument("bucket")
    p.add_argument("prefix", nargs="?", default="")
    a = ap.parse_args()
    s3 = awsutil.client(a.endpoint, "s3")
    if a.cmd == "list":
        keys = awsutil.list_keys(s3, a.bucket, a.prefix)
        if a.json:
            print(json.dumps(keys))
        else:
            for k, _ in keys:
                print(k)
    elif a.cmd == "get":
        try:
            body = s3.get_object(Bucket=a.bucket, Key=a.key)["Body"].read()
        except s3.exceptions.NoSuchKey:
            print(f"no such key: s3://{a.bucket}/{a.key}", file=sys.stderr)
            sys.exit(3)
        sys.stdout.buffer.write(body)
    elif a.cmd == "put":
        s3.upload_file(a.file, a.bucket, a.key)
    elif a.cmd == "delete":
        for k in a.keys:
            s3.delete_object(Bucket=a.bucket, Key=k)
    elif a.cmd == "mb":
        awsutil.ensure_bucket(s3, a.bucket)
    elif a.cmd == "download":
        n = 0
        for k, _ in awsutil.list_keys(s3, a.bucket, a.prefix):
            rel = k[len(a.prefix) :].lstrip("/")
            dest = os.path.join(a.dir, *rel.split("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            s3.download_file(a.bucket, k, dest)
            n += 1
        print(n)
    elif a.cmd == "uploads":
        r = s3.list_multipart_uploads(Bucket=a.bucket, Prefix=a.prefix)
        print(json.dumps([[u["Key"], u["UploadId"]] for u in r.get("Uploads", [])]))


if __name__ == "__main__":
    main()
