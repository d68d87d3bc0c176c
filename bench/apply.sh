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
# Public tools only: bash and python3 (standard library). The input comes from `etl sample
# --incrementals 1 --change-percent 1` (DynamoDB's real layout). Each timing is the median of
# BENCH_RUNS runs (default 3); every apply starts from a fresh copy of the full unwind's output
# (the copy is not timed). BENCH_FORMAT=delta times `--format delta` instead: the full unwind
# creates Delta tables, the apply is one MERGE commit per table (target: less than a fifth), and
# the bytes each MERGE rewrote are listed from the run report.
set -euo pipefail
export LC_ALL=C
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/root/.cache/etl/target}"
ETL="${ETL_BIN:-$CARGO_TARGET_DIR/release/etl}"
RUNS="${BENCH_RUNS:-3}"
FORMAT="${BENCH_FORMAT:-parquet}"
case "$FORMAT" in parquet | delta) ;; *) echo "error: BENCH_FORMAT must be parquet or delta, got \`$FORMAT\`" >&2; exit 2 ;; esac
items=2000000
inc=""
while [ $# -gt 0 ]; do
    case "$1" in
        -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

# The generated input: `etl sample` writes the full export and one incremental export changing 1%
# of the items (updates, removed attributes, type changes, deletes, new items) in the real layout.
FULL="${BENCH_FULL:-$WORK/gen}"
if ! ls "$FULL"/AWSDynamoDB/*/manifest-summary.json >/dev/null 2>&1; then
    log "generating $items items and a 1% incremental export into $FULL"
    "$ETL" sample -q --out "$FULL" --items "$items" --files "${BENCH_FILES:-8}" --seed 1 \
        --incrementals 1 --change-percent 1 --no-final >&2
fi
# export_of TYPE: the folder of the first export of that `exportType` under $FULL.
export_of() {
    python3 - "$FULL" "$1" <<'PY'
import glob, json, os, sys
for p in sorted(glob.glob(os.path.join(sys.argv[1], "AWSDynamoDB", "*", "manifest-summary.json"))):
    if json.load(open(p)).get("exportType", "FULL_EXPORT") == sys.argv[2]:
        print(os.path.dirname(p))
        break
PY
}
FULL_DIR="$(export_of FULL_EXPORT)"
[ -n "$FULL_DIR" ] || { log "no full export under $FULL"; exit 2; }
if [ -z "$inc" ]; then
    inc="$(export_of INCREMENTAL_EXPORT)"
    [ -n "$inc" ] || { log "no incremental export under $FULL (BENCH_FULL without one needs --inc)"; exit 2; }
fi
log "incremental export: $inc ($(grep -o '"itemCount":[0-9]*' "$inc/manifest-summary.json" | cut -d: -f2) changes)"

# seconds CMD...: wall seconds of one run.
seconds() {
    local s e
    s=$(date +%s.%N)
    "$@" >/dev/null
    e=$(date +%s.%N)
    python3 -c "print(f'{$e - $s:.3f}')"
}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

cat "$FULL_DIR"/data/* "$inc"/../data/* >/dev/null 2>&1 || true
full_t=() apply_t=()
for r in $(seq "$RUNS"); do
    rm -rf "$WORK/out"
    full_t+=("$(seconds "$ETL" unwind -q "$FULL_DIR" --out "$WORK/out" --format "$FORMAT")")
    rm -rf "$WORK/apply"
    cp -a "$WORK/out" "$WORK/apply"
    apply_t+=("$(seconds "$ETL" unwind -q "$inc" --out "$WORK/apply" --format "$FORMAT")")
done
keep_ms="$(python3 -c "import json; print(json.load(open('$WORK/out/_etl/run.json'))['timings_ms'].get('keep_base', 0))")"
full_m="$(median "${full_t[@]}")"
apply_m="$(median "${apply_t[@]}")"
items_n="$(grep -o '"itemCount":[0-9]*' "$FULL_DIR/manifest-summary.json" | cut -d: -f2)"
echo "items: $items_n; full unwind: ${full_m}s (runs: ${full_t[*]}; of which keeping _etl/base: ${keep_ms} ms in the last run)"
echo "format: $FORMAT"
echo "apply 1% incremental: ${apply_m}s (runs: ${apply_t[*]})"
if [ "$FORMAT" = delta ]; then
    python3 - "$WORK/apply/_etl/run.json" <<'PY'
import json, sys
for t in json.load(open(sys.argv[1]))["tables"]:
    m = t.get("delta_merge") or {}
    print(f"  {t['name']}: {m.get('mode', '-')}, {m.get('files_rewritten', 0)} files / {m.get('bytes_rewritten', 0)} bytes rewritten, {m.get('files_added', 0)} files / {m.get('bytes_added', 0)} bytes added")
PY
    python3 -c "r = $apply_m / $full_m; print(f'apply / full = {r:.2f} (target < 0.20): ' + ('met' if r < 1/5 else 'missed'))"
else
    python3 -c "r = $apply_m / $full_m; print(f'apply / full = {r:.2f} (target < 0.33): ' + ('met' if r < 1/3 else 'missed'))"
fi
