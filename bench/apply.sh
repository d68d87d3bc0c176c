#!/usr/bin/env bash
# Times a full `etl unwind` of a table against applying one incremental export that changes 1%
# of its items onto that output (`etl unwind INC --out DIR`). The issue's target: the apply takes
# less than a third of the full unwind.
#
#   bench/apply.sh [ITEMS]        (default 2000000 items; `etl sample --items`)
#   bench/apply.sh --inc DIR      use this incremental export folder (`AWSDynamoDB/<id>`) instead of
#                                 the generated one; it must be of the generated table (BENCH_FULL
#                                 names another full export folder holding `AWSDynamoDB/`)
#
# Public tools only: bash, python3 (standard library) and GNU time when present. The incremental
# export is written by the small generator below in DynamoDB's real layout (its manifests with
# MD5s and counts, change lines with Keys / NewImage / WriteTimestampMicros in the shared
# `AWSDynamoDB/data/` folder): 1% of the items, every one updated (one attribute set to a new
# value). Each timing is the median of BENCH_RUNS runs (default 3); every apply starts from a
# fresh copy of the full unwind's output (the copy is not timed).
set -euo pipefail
export LC_ALL=C
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/root/.cache/etl/target}"
ETL="${ETL_BIN:-$CARGO_TARGET_DIR/release/etl}"
RUNS="${BENCH_RUNS:-3}"
items=2000000
inc=""
while [ $# -gt 0 ]; do
    case "$1" in
        -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --inc) inc="$2"; shift 2 ;;
        *[!0-9]*) echo "error: ITEMS must be a positive integer, got \`$1\`" >&2; exit 2 ;;
        *) items="$1"; shift ;;
    esac
done
log() { echo "bench: $*" >&2; }
WORK="${BENCH_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/etl-apply-bench.XXXXXX")}"
[ -n "${BENCH_DIR:-}" ] || [ "${BENCH_KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK"
log "work folder: $WORK"

FULL="${BENCH_FULL:-$WORK/full}"
if ! ls "$FULL"/AWSDynamoDB/*/manifest-summary.json >/dev/null 2>&1; then
    log "generating $items items into $FULL"
    "$ETL" sample -q --out "$FULL" --items "$items" --files "${BENCH_FILES:-8}" --seed 1 >&2
fi
FULL_DIR="$(dirname "$(ls "$FULL"/AWSDynamoDB/*/manifest-summary.json | head -n 1)")"

if [ -z "$inc" ]; then
    inc="$(python3 - "$FULL_DIR" "$WORK/inc" <<'PY'
import base64, gzip, hashlib, json, os, random, sys
from datetime import datetime, timedelta
full, root = sys.argv[1], sys.argv[2]
summary = json.load(open(os.path.join(full, "manifest-summary.json")))
t0 = datetime.strptime(summary["exportTime"], "%Y-%m-%dT%H:%M:%S.%fZ")
frm, to = t0 - timedelta(minutes=1), t0 + timedelta(hours=1)
stamp = lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
export_id = f"{int(to.timestamp() * 1000):014d}-bench001"
rng = random.Random(1)
lines = []
for name in sorted(os.listdir(os.path.join(full, "data"))):
    with gzip.open(os.path.join(full, "data", name), "rt") as f:
        for line in f:
            if not line.strip() or rng.random() >= 0.01:
                continue
            item = json.loads(line)["Item"]
            keys = {k: item[k] for k in ("PK", "SK") if k in item}
            new = dict(item, bench_note={"S": "changed"})
            micros = int((t0 + timedelta(seconds=1 + len(lines) % 3000)).timestamp() * 1_000_000)
            lines.append(json.dumps({"Metadata": {"WriteTimestampMicros": {"N": str(micros)}}, "Keys": keys,
                                     "OldImage": item, "NewImage": new}, separators=(",", ":")))
data_key = "AWSDynamoDB/data/benchincrementalchanges0001.json.gz"
os.makedirs(os.path.join(root, "AWSDynamoDB/data"), exist_ok=True)
exp = os.path.join(root, "AWSDynamoDB", export_id)
os.makedirs(exp, exist_ok=True)
body = gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0)
open(os.path.join(root, data_key), "wb").write(body)
b64md5 = lambda b: base64.b64encode(hashlib.md5(b).digest()).decode()
files = json.dumps({"itemCount": len(lines), "md5Checksum": b64md5(body), "etag": "0-1", "dataFileS3Key": data_key}) + "\n"
open(os.path.join(exp, "manifest-files.json"), "w").write(files)
open(os.path.join(exp, "manifest-files.md5"), "w").write(b64md5(files.encode()))
s = {"version": "2023-08-01", "exportArn": summary["tableArn"] + "/export/" + export_id,
     "startTime": stamp(to), "endTime": stamp(to), "tableArn": summary["tableArn"], "tableId": summary.get("tableId"),
     "exportFromTime": stamp(frm), "exportToTime": stamp(to), "s3Bucket": "bench", "s3Prefix": None,
     "s3SseAlgorithm": "AES256", "s3SseKmsKeyId": None,
     "manifestFilesS3Key": f"AWSDynamoDB/{export_id}/manifest-files.json", "billedSizeBytes": len(body),
     "itemCount": len(lines), "outputFormat": "DYNAMODB_JSON", "outputView": "NEW_AND_OLD_IMAGES",
     "exportType": "INCREMENTAL_EXPORT"}
text = json.dumps(s, separators=(",", ":"))
open(os.path.join(exp, "manifest-summary.json"), "w").write(text)
open(os.path.join(exp, "manifest-summary.md5"), "w").write(b64md5(text.encode()))
open(os.path.join(exp, "_started"), "w").write("")
print(exp)
PY
)"
    log "incremental export: $inc ($(grep -o '"itemCount":[0-9]*' "$inc/manifest-summary.json" | cut -d: -f2) changes)"
fi

# seconds CMD...: wall seconds of one run.
seconds() {
    local s e
    s=$(date +%s.%N)
    "$@" >/dev/null
    e=$(date +%s.%N)
    python3 -c "print(f'{$e - $s:.3f}')"
}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

cat "$FULL_DIR"/data/* >/dev/null
full_t=() apply_t=()
for r in $(seq "$RUNS"); do
    rm -rf "$WORK/out"
    full_t+=("$(seconds "$ETL" unwind -q "$FULL_DIR" --out "$WORK/out")")
    rm -rf "$WORK/apply"
    cp -a "$WORK/out" "$WORK/apply"
    apply_t+=("$(seconds "$ETL" unwind -q "$inc" --out "$WORK/apply")")
done
keep_ms="$(python3 -c "import json; print(json.load(open('$WORK/out/_etl/run.json'))['timings_ms'].get('keep_base', 0))")"
full_m="$(median "${full_t[@]}")"
apply_m="$(median "${apply_t[@]}")"
items_n="$(grep -o '"itemCount":[0-9]*' "$FULL_DIR/manifest-summary.json" | cut -d: -f2)"
echo "items: $items_n; full unwind: ${full_m}s (runs: ${full_t[*]}; of which keeping _etl/base: ${keep_ms} ms in the last run)"
echo "apply 1% incremental: ${apply_m}s (runs: ${apply_t[*]})"
python3 -c "r = $apply_m / $full_m; print(f'apply / full = {r:.2f} (target < 0.33): ' + ('met' if r < 1/3 else 'missed'))"
