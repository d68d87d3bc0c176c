"""Shared by the helpers in tests/aws/: boto3 clients for a local AWS stand-in (moto).

Every client talks only to the endpoint it is given (a 127.0.0.1 URL in the tests), with dummy
credentials and region passed explicitly, so the developer's own AWS configuration never matters.
Retries are few and timeouts short: a helper against a dead server fails in seconds, not minutes.
"""
import sys
from urllib.parse import urlparse

import boto3
from botocore.config import Config

REGION = "us-east-1"


def client(endpoint, service):
    host = urlparse(endpoint).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit(f"refusing endpoint {endpoint!r}: the test helpers only talk to loopback")
    return boto3.session.Session().client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(
            connect_timeout=5,
            read_timeout=60,
            retries={"max_attempts": 3, "mode": "standard"},
            s3={"addressing_style": "path"},
        ),
    )


def ensure_bucket(s3, bucket):
    """Creates `bucket` unless it exists (us-east-1 takes no location constraint)."""
    try:
        s3.head_bucket(Bucket=bucket)
    except s3.exceptions.ClientError as e:
        if e.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise
        s3.create_bucket(Bucket=bucket)


def join_key(prefix, rest):
    """`prefix` and `rest` joined with exactly one slash; an empty prefix adds nothing."""
    prefix = prefix.strip("/")
    rest = rest.lstrip("/")
    return f"{prefix}/{rest}" if prefix else rest


def list_keys(s3, bucket, prefix=""):
    """Every object under `prefix` as (key, size), in key order."""
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            out.append((o["Key"], o["Size"]))
    return sorted(out)
