"""Regroups a generated export's data files into files of uneven sizes, the largest last.

    python bench/uneven.py SRC DST

SRC holds one export (`SRC/AWSDynamoDB/<ExportId>/`, as `etl sample --out SRC` writes it); DST
gets the same export id with the same items in the same order, its non-empty data files
concatenated (gzip members, which every gzip reader reads as one stream) into groups of 1, 1, ...,
n/8, n/4, n/2 files: the last file in plan order holds about half the items. The manifests are
rewritten with each new file's item count and MD5; the summary is kept as it is.

A reader that takes files in plan order is left reading the last file alone at the end; this is
the export `bench/run.sh --uneven` times.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import sys


def groups(n: int) -> list[int]:
    """Group sizes summing to n, smallest first: half of what is left, then half again, down to 1."""
    out = []
    left = n
    while left > 0:
        g = max(1, left // 2)
        out.append(g)
        left -= g
    return sorted(out)


def md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = sys.argv[1], sys.argv[2]
    ids = os.listdir(os.path.join(src, "AWSDynamoDB"))
    if len(ids) != 1:
        print(f"error: `{src}/AWSDynamoDB` must hold exactly one export, found {len(ids)}", file=sys.stderr)
        return 2
    export_id = ids[0]
    sdir = os.path.join(src, "AWSDynamoDB", export_id)
    ddir = os.path.join(dst, "AWSDynamoDB", export_id)
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(os.path.join(ddir, "data"))
    with open(os.path.join(sdir, "manifest-files.json")) as f:
        entries = [json.loads(line) for line in f if line.strip()]
    nonempty = [e for e in entries if e["itemCount"] > 0]
    empty = [e for e in entries if e["itemCount"] == 0]
    manifest = []
    k = 0
    for i, g in enumerate(groups(len(nonempty))):
        part, k = nonempty[k : k + g], k + g
        data = b""
        for e in part:
            with open(os.path.join(src, e["dataFileS3Key"]), "rb") as f:
                data += f.read()
        # Names sort in plan order; 26 characters like AWS's.
        key = f"AWSDynamoDB/{export_id}/data/{i:04d}uneven{g:04d}xxxxxxxxxxxx.json.gz"
        with open(os.path.join(dst, key), "wb") as f:
            f.write(data)
        manifest.append(
            {
                "itemCount": sum(e["itemCount"] for e in part),
                "md5Checksum": md5_b64(data),
                "etag": hashlib.md5(data).hexdigest() + "-1",
                "dataFileS3Key": key,
            }
        )
    for e in empty:
        shutil.copy(os.path.join(src, e["dataFileS3Key"]), os.path.join(dst, e["dataFileS3Key"]))
        manifest.append(e)
    text = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in manifest).encode()
    with open(os.path.join(ddir, "manifest-files.json"), "wb") as f:
        f.write(text)
    with open(os.path.join(ddir, "manifest-files.md5"), "w") as f:
        f.write(md5_b64(text))
    for name in ("manifest-summary.json", "manifest-summary.md5", "_started"):
        if os.path.exists(os.path.join(sdir, name)):
            shutil.copy(os.path.join(sdir, name), os.path.join(ddir, name))
    sizes = ", ".join(str(e["itemCount"]) for e in manifest if e["itemCount"] > 0)
    print(f"uneven.py: {len(nonempty)} files regrouped into {len(manifest)} (items: {sizes})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
