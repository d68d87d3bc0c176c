"""Uploads a local folder (for example an export with its manifests and .md5 files) to S3.

Usage: upload.py ENDPOINT LOCAL_DIR BUCKET PREFIX [--as-export]

Creates BUCKET when missing and puts every file below LOCAL_DIR at PREFIX/<relative path>.
Plain mode copies bytes unchanged: the manifests keep the keys they had (relative to the folder
that holds AWSDynamoDB/), as when someone copies a downloaded export back to S3.
--as-export instead rewrites the manifests the way AWS writes an export made with S3Prefix=PREFIX:
`s3Bucket`, `s3Prefix`, `manifestFilesS3Key` and every `dataFileS3Key` become full keys from the
bucket root, and the .md5 side files are recomputed (data files are unchanged, so their
md5Checksum stays right). Prints the number of objects written.
"""
import argparse
import base64
import hashlib
import json
import os

import awsutil


def md5_b64(data):
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def rewrite(rel, data, bucket, prefix):
    """The bytes AWS would have written for `rel` had the export been made at `prefix`."""
    name = os.path.basename(rel)
    if name == "manifest-summary.json":
        s = json.loads(data)
        s["s3Bucket"] = bucket
        s["s3Prefix"] = prefix.strip("/") or None
        s["manifestFilesS3Key"] = awsutil.join_key(prefix, s["manifestFilesS3Key"])
        return json.dumps(s, separators=(",", ":")).encode()
    if name == "manifest-files.json":
        lines = []
        for line in data.decode().splitlines():
            if line.strip():
                f = json.loads(line)
                f["dataFileS3Key"] = awsutil.join_key(prefix, f["dataFileS3Key"])
                lines.append(json.dumps(f, separators=(",", ":")) + "\n")
        return "".join(lines).encode()
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("endpoint")
    ap.add_argument("local_dir")
    ap.add_argument("bucket")
    ap.add_argument("prefix")
    ap.add_argument("--as-export", action="store_true", help="rewrite manifests to full keys under PREFIX")
    a = ap.parse_args()
    s3 = awsutil.client(a.endpoint, "s3")
    awsutil.ensure_bucket(s3, a.bucket)
    files = {}
    for d, _, names in os.walk(a.local_dir):
        for n in names:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, a.local_dir).replace(os.sep, "/")
            with open(p, "rb") as fh:
                files[rel] = fh.read()
    if a.as_export:
        files = {rel: rewrite(rel, data, a.bucket, a.prefix) for rel, data in files.items()}
        for rel in list(files):
            if rel.endswith(".md5"):
                manifest = rel[: -len(".md5")] + ".json"
                if manifest in files:
                    files[rel] = md5_b64(files[manifest]).encode()
    for rel, data in sorted(files.items()):
        s3.put_object(Bucket=a.bucket, Key=awsutil.join_key(a.prefix, rel), Body=data)
    print(len(files))


if __name__ == "__main__":
    main()
