#!/usr/bin/env bash
# Times a full `etl unwind` of a table against applying one incremental export that changes 1%
# of its items onto that output (`etl unwind INC --out DIR`). The issue's target: the apply takes
# less than a third of the full unwind.
#
#   bench/apply.sh [ITEMS]        (default 2000000 items; `etl sample --items`)
#   bench/apply.sh --inc DIR      use this incremental export folder (`AWSDynamoDB/<id>`) instead of
#                                 the generated one; it must be of the generated table (BENCH_FULL
#                                 names another full export folder holding `AWSDynamoDB/`)
#   BENCH_HISTORY=K bench/apply.sh [ITEMS]
#                                 a scheduled job's K-th run: K incremental exports are applied one
#                                 at a time first (not timed), then the apply of export K+1 is timed
#                                 against the whole chain unwound in one run (full export and K+1
#                                 incremental exports: what an apply re-read before the output kept
#                                 its incremental exports compacted into one), with `_etl/base/`'s size
#
# Public tools only: bash and python3 (standard library). The input comes from `etl sample
# --incrementals 1 --change-percent 1` (DynamoDB's real layout). Each timing is the median of
# BENCH_RUNS runs (default 3); every apply starts from a fresh copy of the full unwind's output
# (the copy is not timed, and written back to disk before the apply's clock starts, as every
# timed command here is). BENCH_FORMAT=delta times `--format delta` instead: the full unwind
# creates Delta tables, the apply is one MERGE commit per table (target: less than a fifth), and
# the bytes each MERGE rewrote are listed from the run report; BENCH_FORMAT=delta-dv is the same
# with `--deletion-vectors` (the MERGE marks rows of changed keys deleted instead of rewriting
# files; the files it marked and the vector bytes are listed too). Each run also times every item
# table of the full output read and rewritten once (`etl sql` `COPY`): what an apply that
# rewrites the tables cannot go below, whatever it does about the changes. BENCH_MAPPING=FILE
# runs every unwind with `--mapping FILE` (mapped tables find the changed keys by their key
# template columns; see "Incremental applies" in mappings/README.md). BENCH_CHANGE_PERCENT=P
# generates incremental exports that change P% of the items instead of 1% (a fresh BENCH_DIR: the
# input is generated once per folder).
set -euo pipefail
export LC_ALL=C
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/root/.cache/etl/target}"
ETL="${ETL_BIN:-$CARGO_TARGET_DIR/release/etl}"
RUNS="${BENCH_RUNS:-3}"
FORMAT="${BENCH_FORMAT:-parquet}"
case "$FORMAT" in
    parquet | delta) FORMAT_ARGS=(--format "$FORMAT") ;;
    delta-dv) FORMAT_ARGS=(--format delta --deletion-vectors) ;;
    parquet-in-place) FORMAT_ARGS=(--in-place) ;;
    *) echo "error: BENCH_FORMAT must be parquet, parquet-in-place, delta or delta-dv, got \`$FORMAT\`" >&2; exit 2 ;;
esac
MAP_ARGS=()
if [ -n "${BENCH_MAPPING:-}" ]; then
    MAP_ARGS=(--mapping "$BENCH_MAPPING")
    FORMAT_ARGS+=("${MAP_ARGS[@]}")
fi
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
HISTORY="${BENCH_HISTORY:-0}"
case "$HISTORY" in *[!0-9]* | '') echo "error: BENCH_HISTORY must be a whole number, got \`$HISTORY\`" >&2; exit 2 ;; esac
log() { echo "bench: $*" >&2; }
WORK="${BENCH_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/etl-apply-bench.XXXXXX")}"
[ -n "${BENCH_DIR:-}" ] || [ "${BENCH_KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK"
log "work folder: $WORK"

# The generated input: `etl sample` writes the full export and one incremental export changing 1%
# (BENCH_CHANGE_PERCENT) of the items (updates, removed attributes, type changes, deletes, new
# items) in the real layout.
CHANGE_PERCENT="${BENCH_CHANGE_PERCENT:-1}"
FULL="${BENCH_FULL:-$WORK/gen}"
if ! ls "$FULL"/AWSDynamoDB/*/manifest-summary.json >/dev/null 2>&1; then
    log "generating $items items and a $CHANGE_PERCENT% incremental export into $FULL"
    "$ETL" sample -q --out "$FULL" --items "$items" --files "${BENCH_FILES:-8}" --seed 1 \
        --incrementals "$((HISTORY + 1))" --change-percent "$CHANGE_PERCENT" --no-final >&2
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

# The incremental exports of $FULL in window order.
incrementals() {
    python3 - "$FULL" <<'PY'
import glob, json, os, sys
found = []
for p in glob.glob(os.path.join(sys.argv[1], "AWSDynamoDB", "*", "manifest-summary.json")):
    s = json.load(open(p))
    if s.get("exportType") == "INCREMENTAL_EXPORT":
        found.append((s["exportFromTime"], s["exportToTime"], os.path.dirname(p)))
for _, _, d in sorted(found):
    print(d)
PY
}

# seconds CMD...: wall seconds of one run.
seconds() {
    local s e
    # The page cache is written back first (not timed): the command does not pay for the writes
    # of the untimed copy or run before it (`cp -a` of the output leaves ~130 MB to write back).
    sync
    s=$(date +%s.%N)
    "$@" >/dev/null
    e=$(date +%s.%N)
    python3 -c "print(f'{$e - $s:.3f}')"
}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# rows_of DIR: every table's rows, as `etl sql` prints them in CSV, sorted (a mapped table has
# no `PK` or `SK` to order by).
rows_of() {
    python3 - "$1/_etl/run.json" >"$WORK/rows.sql" <<'PY'
import json, sys
for t in json.load(open(sys.argv[1]))["tables"]:
    if t["name"] != "_rejects" and t["rows"] > 0:
        q = t["name"].replace('"', '""')
        print(f'SELECT \'{q}\' AS "table", * FROM "{q}";')
PY
    "$ETL" sql -q --format csv -f "$WORK/rows.sql" --data "$1" | sort | md5sum
}
# same_rows APPLIED REFERENCE: stops the bench when an in-place apply's tables are not the
# reference's, row for row.
same_rows() {
    case "$FORMAT" in parquet-in-place | delta | delta-dv) ;; *) return 0 ;; esac
    grep -q '"applied_in_place": *true' "$1/_etl/run.json" || { log "the apply did not run in place: $(grep -A3 '"warnings"' "$1/_etl/run.json")"; exit 1; }
    [ "$(rows_of "$1")" = "$(rows_of "$2")" ] || { log "the in-place apply's rows are not the reference's"; exit 1; }
    log "checked: the in-place apply's rows are the reference's"
}

cat "$FULL_DIR"/data/* "$inc"/../data/* >/dev/null 2>&1 || true
if [ "$HISTORY" -gt 0 ]; then
    mapfile -t incs < <(incrementals)
    [ "${#incs[@]}" -gt "$HISTORY" ] || { log "$FULL holds ${#incs[@]} incremental exports; BENCH_HISTORY=$HISTORY needs $((HISTORY + 1))"; exit 2; }
    log "applying $HISTORY incremental exports one at a time (not timed)"
    rm -rf "$WORK/history"
    "$ETL" unwind -q "$FULL_DIR" --out "$WORK/history" "${FORMAT_ARGS[@]}"
    for k in $(seq 0 $((HISTORY - 1))); do
        "$ETL" unwind -q "${incs[$k]}" --out "$WORK/history" "${FORMAT_ARGS[@]}"
    done
    next="${incs[$HISTORY]}"
    chain_t=() next_t=()
    for r in $(seq "$RUNS"); do
        rm -rf "$WORK/apply"
        cp -a "$WORK/history" "$WORK/apply"
        next_t+=("$(seconds "$ETL" unwind -q "$next" --out "$WORK/apply" "${FORMAT_ARGS[@]}")")
        rm -rf "$WORK/chain"
        chain_t+=("$(seconds "$ETL" unwind -q "$FULL_DIR" "${incs[@]:0:$((HISTORY + 1))}" --out "$WORK/chain" "${FORMAT_ARGS[@]}")")
    done
    cmp_tables() { (cd "$1" && find . -path ./_etl -prune -o -type f -print | sort | xargs md5sum); }
    [ "$(cmp_tables "$WORK/apply")" = "$(cmp_tables "$WORK/chain")" ] || [ "$FORMAT" != parquet ] \
        || { log "the apply's tables are not the chain's"; exit 1; }
    same_rows "$WORK/apply" "$WORK/chain"
    base_kb="$(du -sk "$WORK/apply/_etl/base" | cut -f1)"
    exports_bytes="$(for d in "${incs[@]:0:$((HISTORY + 1))}"; do cat "$d/manifest-files.json"; done \
        | python3 -c "import json, os, sys; print(sum(os.path.getsize(os.path.join('$FULL', json.loads(l)['dataFileS3Key'])) for l in sys.stdin if l.strip()))")"
    echo "format: $FORMAT; after $HISTORY applied incremental exports of $CHANGE_PERCENT%"
    echo "apply of export $((HISTORY + 1)) onto the output: $(median "${next_t[@]}")s (runs: ${next_t[*]})"
    echo "the whole chain in one run (every export read, as an apply did before compaction): $(median "${chain_t[@]}")s (runs: ${chain_t[*]})"
    echo "_etl/base/ after the apply: $((base_kb / 1024)) MiB (the $((HISTORY + 1)) incremental exports' data files: $((exports_bytes / 1048576)) MiB of gzip)"
    exit 0
fi
full_t=() apply_t=() rewrite_t=()
for r in $(seq "$RUNS"); do
    rm -rf "$WORK/out"
    full_t+=("$(seconds "$ETL" unwind -q "$FULL_DIR" --out "$WORK/out" "${FORMAT_ARGS[@]}")")
    rm -rf "$WORK/apply"
    cp -a "$WORK/out" "$WORK/apply"
    apply_t+=("$(seconds "$ETL" unwind -q "$inc" --out "$WORK/apply" "${FORMAT_ARGS[@]}")")
    # The floor of any apply that rewrites the tables: each item table read and written once
    # (`COPY` through `etl sql`, zstd level 1 as etl writes), with nothing decoded or looked up.
    python3 - "$WORK/out/_etl/run.json" "$WORK/rewrite" >"$WORK/rewrite.sql" <<'PY'
import json, sys
for t in json.load(open(sys.argv[1]))["tables"]:
    if t["name"] != "_rejects":
        q = t["name"].replace('"', '""')
        print(f"""COPY (SELECT * FROM "{q}") TO '{sys.argv[2]}/{t['name']}.parquet' STORED AS PARQUET OPTIONS ('format.compression' 'zstd(1)');""")
PY
    rm -rf "$WORK/rewrite"
    mkdir -p "$WORK/rewrite"
    rewrite_t+=("$(seconds "$ETL" sql -q --allow-write -f "$WORK/rewrite.sql" --data "$WORK/out")")
done
# The apply's rows against a replay's: the same export applied onto a copy of the Parquet output,
# or for a Delta output the chain unwound into Parquet in one run.
if [ "$FORMAT" != parquet ]; then
    rm -rf "$WORK/replay"
    if [ "$FORMAT" = parquet-in-place ]; then
        cp -a "$WORK/out" "$WORK/replay"
        "$ETL" unwind -q "$inc" --out "$WORK/replay" "${MAP_ARGS[@]}" >/dev/null
    else
        "$ETL" unwind -q "$FULL_DIR" "$inc" --out "$WORK/replay" "${MAP_ARGS[@]}" >/dev/null
    fi
    same_rows "$WORK/apply" "$WORK/replay"
fi
keep_ms="$(python3 -c "import json; print(json.load(open('$WORK/out/_etl/run.json'))['timings_ms'].get('keep_base', 0))")"
full_m="$(median "${full_t[@]}")"
apply_m="$(median "${apply_t[@]}")"
items_n="$(grep -o '"itemCount":[0-9]*' "$FULL_DIR/manifest-summary.json" | cut -d: -f2)"
echo "items: $items_n; full unwind: ${full_m}s (runs: ${full_t[*]}; of which keeping _etl/base: ${keep_ms} ms in the last run)"
echo "format: $FORMAT${BENCH_MAPPING:+, mapping $BENCH_MAPPING}"
in_place="$(python3 -c "import json; print(str(json.load(open('$WORK/apply/_etl/run.json'))['chain'].get('applied_in_place', False)).lower())")"
echo "apply $CHANGE_PERCENT% incremental: ${apply_m}s (runs: ${apply_t[*]}; applied in place: $in_place)"
rewrite_m="$(median "${rewrite_t[@]}")"
python3 -c "print(f'every item table read and rewritten once (etl sql COPY): ${rewrite_m}s (runs: ${rewrite_t[*]}) = {$rewrite_m / $full_m:.2f} of the full unwind, the least an apply that rewrites every table can take')"
if [ "$FORMAT" = delta ] || [ "$FORMAT" = delta-dv ]; then
    python3 - "$WORK/apply/_etl/run.json" <<'PY'
import json, sys
for t in json.load(open(sys.argv[1]))["tables"]:
    m = t.get("delta_merge") or {}
    print(f"  {t['name']}: {m.get('mode', '-')}, {m.get('files_rewritten', 0)} files / {m.get('bytes_rewritten', 0)} bytes rewritten, {m.get('files_marked', 0)} files marked / {m.get('deletion_vector_bytes', 0)} vector bytes, {m.get('files_added', 0)} files / {m.get('bytes_added', 0)} bytes added")
PY
    python3 -c "r = $apply_m / $full_m; print(f'apply / full = {r:.2f} (target < 0.20): ' + ('met' if r < 1/5 else 'missed'))"
else
    python3 -c "r = $apply_m / $full_m; print(f'apply / full = {r:.2f} (target < 0.33): ' + ('met' if r < 1/3 else 'missed'))"
fi
[ "$CHANGE_PERCENT" = 1 ] || echo "(the targets are the issues' for 1% of the items changed; this export changed $CHANGE_PERCENT%)"
