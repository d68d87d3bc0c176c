#!/usr/bin/env bash
# Times `etl unwind` (with and without a mapping) against DuckDB and against the parse floor on
# a generated export. See bench/README.md for the targets and every knob.
#
#   bench/run.sh [ITEMS]                  compare etl, etl --mapping, DuckDB and the floor (default 2000000 items)
#   bench/run.sh --scaling [SMALL LARGE]  etl alone on SMALL and LARGE exports (default 1M and 4M):
#                                         peak RSS growth and time per item
#   bench/run.sh --uneven [ITEMS]         etl alone on one export as 3 x BENCH_FILES even files, then
#                                         regrouped so that the last file holds half the items
set -euo pipefail
export LC_ALL=C

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/root/.cache/etl/target}"
VENV="${ETL_VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
# One DuckDB for tests and bench: the bench shares the test venv, so it takes the pin from
# scripts/requirements-test.txt rather than installing a different version into it.
DUCKDB_VERSION="$(sed -n 's/^duckdb==\([^[:space:]]*\).*/\1/p' "$ROOT/scripts/requirements-test.txt" 2>/dev/null | head -n 1)"
DUCKDB_VERSION="${DUCKDB_VERSION:-2.0.1}"
FILES="${BENCH_FILES:-8}"
SEED="${BENCH_SEED:-1}"
RUNS="${BENCH_RUNS:-5}"
MAPPING="${BENCH_MAPPING:-$ROOT/mappings/ecommerce.toml}"

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    cat <<'EOF'

environment: CARGO_TARGET_DIR (default /root/.cache/etl/target), ETL_VENV (default .venv),
BENCH_DIR (work folder; default a new temporary one, removed at the end unless BENCH_KEEP=1),
BENCH_FILES (data files, default 8), BENCH_SEED (default 1), BENCH_RUNS (runs per tool, default
5: median, min and max reported), BENCH_STRICT=1 (exit 1 when a target is missed),
BENCH_NO_BUILD=1 (skip the build), ETL_BIN / FLOOR_BIN (binaries to time instead of the ones in
CARGO_TARGET_DIR), BENCH_MAPPING (the mapped run's mapping, default mappings/ecommerce.toml;
`none` skips the mapped run). Every etl run's output is checked (bench/verify.py) before a figure is
reported: a binary that does not do the job fails the bench.
EOF
}

mode=compare
items=2000000
small=1000000
large=4000000
case "${1:-}" in
    -h | --help) usage; exit 0 ;;
    --scaling)
        mode=scaling
        small="${2:-$small}"
        large="${3:-$large}"
        ;;
    --uneven)
        mode=uneven
        items="${2:-$items}"
        ;;
    "") ;;
    *[!0-9]*) echo "error: ITEMS must be a positive integer, got \`$1\`" >&2; usage >&2; exit 2 ;;
    *) items="$1" ;;
esac

log() { echo "bench: $*" >&2; }

ensure_gnu_time() {
    if /usr/bin/time --version 2>&1 | grep -q GNU; then
        return
    fi
    log "installing GNU time (apt-get)"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >&2
}

ensure_duckdb() {
    if "$VENV/bin/python" -c "import duckdb, sys; sys.exit(duckdb.__version__ != '$DUCKDB_VERSION')" 2>/dev/null; then
        return
    fi
    log "creating $VENV with duckdb==$DUCKDB_VERSION"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "duckdb==$DUCKDB_VERSION" >&2
}

if [ -n "${BENCH_DIR:-}" ]; then
    WORK="$BENCH_DIR"
    mkdir -p "$WORK"
else
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/etl-bench.XXXXXX")"
    if [ "${BENCH_KEEP:-0}" != 1 ]; then
        trap 'rm -rf "$WORK"' EXIT
    fi
fi
log "work folder: $WORK"

ensure_gnu_time
if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
    # The test build: the same features as `scripts/test`, so nothing is compiled twice; it also
    # builds the examples (the floor).
    log "building etl and the floor example (release)"
    (cd "$ROOT" && cargo test --release --locked --no-run >&2)
fi
ETL="${ETL_BIN:-$CARGO_TARGET_DIR/release/etl}"
FLOOR="${FLOOR_BIN:-$CARGO_TARGET_DIR/release/examples/floor}"
# The export generator is always the build's etl, whatever binary is timed.
SAMPLE="$CARGO_TARGET_DIR/release/etl"

# generate ITEMS NAME: writes $WORK/NAME/AWSDynamoDB/<ExportId>/ unless it is already there;
# sets EXPORT_DIR and ITEM_COUNT.
generate() {
    local n="$1" out="$WORK/$2"
    if ! ls "$out"/AWSDynamoDB/*/manifest-summary.json >/dev/null 2>&1; then
        log "generating $n items into $out"
        "$SAMPLE" sample --out "$out" --items "$n" --files "$FILES" --seed "$SEED" >&2
    fi
    local summary
    summary="$(ls "$out"/AWSDynamoDB/*/manifest-summary.json | head -n 1)"
    EXPORT_DIR="$(dirname "$summary")"
    ITEM_COUNT="$(grep -o '"itemCount":[0-9]*' "$summary" | cut -d: -f2)"
    # Same start for every tool: the data files are in the page cache.
    cat "$EXPORT_DIR"/data/*.json.gz >/dev/null
}

declare -A WALLS RSS INPROC CORES

# measure NAME VERIFY CMD...: runs CMD $RUNS times under GNU time, each into a fresh
# $WORK/NAME-out; after each run, VERIFY (a shell command, or `-`) must succeed or the bench
# stops. Keeps every wall in WALLS[NAME] (seconds, space-separated), the cores used (user + sys
# CPU seconds / wall) in CORES[NAME], the highest peak RSS in RSS[NAME] (KiB), and for DuckDB its
# in-process time (the `total:` line) in INPROC[NAME].
measure() {
    local name="$1" verify="$2"
    shift 2
    local run start end wall rss inproc cpu
    for ((run = 1; run <= RUNS; run++)); do
        log "running $name ($run/$RUNS)"
        rm -rf "$WORK/$name-out"
        # The page cache is written back first (not timed): a command does not pay for the
        # writes of the one before it (DuckDB does not sync its output; etl syncs its own).
        sync
        start="$(date +%s.%N)"
        if ! /usr/bin/time -v -o "$WORK/$name.time" "$@" >"$WORK/$name.log" 2>"$WORK/$name.err"; then
            log "$name failed; last lines of its output:"
            tail -n 20 "$WORK/$name.log" "$WORK/$name.err" >&2
            exit 2
        fi
        end="$(date +%s.%N)"
        if [ "$verify" != - ] && ! eval "$verify" >&2; then
            log "$name: its output does not check out; no figure is reported"
            exit 2
        fi
        wall="$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }')"
        WALLS[$name]="${WALLS[$name]:-} $wall"
        cpu="$(awk -F': ' '/User time \(seconds\)|System time \(seconds\)/ { s += $2 } END { print s + 0 }' "$WORK/$name.time")"
        CORES[$name]="${CORES[$name]:-} $(awk -v c="$cpu" -v w="$wall" 'BEGIN { printf "%.2f", c / w }')"
        rss="$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$WORK/$name.time")"
        if [ -z "${RSS[$name]:-}" ] || [ "$rss" -gt "${RSS[$name]}" ]; then
            RSS[$name]="$rss"
        fi
        inproc="$(sed -n 's/^total: \([0-9.]*\)s$/\1/p' "$WORK/$name.err")"
        if [ -n "$inproc" ]; then
            INPROC[$name]="${INPROC[$name]:-} $inproc"
        fi
    done
}

# stat median|min|max LIST: of space-separated numbers.
stat() {
    echo "$2" | tr ' ' '\n' | grep . | sort -g | awk -v k="$1" '
        { v[NR] = $1 }
        END {
            if (k == "min") print v[1]
            else if (k == "max") print v[NR]
            else if (NR % 2) print v[(NR + 1) / 2]
            else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2
        }'
}
median() { stat median "${WALLS[$1]}"; }

mib() { awk -v k="$1" 'BEGIN { printf "%.0f", k / 1024 }'; }
rate() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.0f", n / s }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

failed=0
# check LABEL VALUE OP LIMIT: prints one target line, remembers a miss.
check() {
    local label="$1" value="$2" op="$3" limit="$4" verdict
    if awk -v v="$value" -v l="$limit" -v op="$op" 'BEGIN { exit !((op == "<=" && v <= l) || (op == ">=" && v >= l) || (op == "<" && v < l)) }'; then
        verdict=PASS
    else
        verdict=MISS
        failed=1
    fi
    echo "- $verdict: $label = $value (target $op $limit)"
}

# The cores-used target: 1.8 on 2 cores or more, 90% of the cores on fewer.
cores_target() { awk -v n="$(nproc)" 'BEGIN { print (n >= 2 ? 1.8 : 0.9 * n) }'; }

finish() {
    if [ "$failed" = 1 ] && [ "${BENCH_STRICT:-0}" = 1 ]; then
        exit 1
    fi
}

row() { # row LABEL NAME ITEMS: median wall (min-max), cores used (median), peak RSS, items/s and
    # microseconds per item at the median
    local w
    w="$(median "$2")"
    printf '| %s | %.2f (%.2f-%.2f) | %.2f | %s | %s | %.2f |\n' "$1" "$w" "$(stat min "${WALLS[$2]}")" \
        "$(stat max "${WALLS[$2]}")" "$(stat median "${CORES[$2]}")" "$(mib "${RSS[$2]}")" "$(rate "$3" "$w")" \
        "$(awk -v n="$3" -v s="$w" 'BEGIN { printf "%.2f", s * 1e6 / n }')"
}
HEADER='| tool | wall s, median (min-max) | cores used | peak RSS MiB | items/s | µs/item |'
RULE='|---|---:|---:|---:|---:|---:|'


# The check of one etl output: bench/verify.py against the manifest (and DuckDB's output, when given).
verify_etl() { # verify_etl OUT [DUCKDB_OUT [--mapped]]
    local duck=()
    [ -n "${2:-}" ] && duck=(--duckdb "$2")
    [ -n "${3:-}" ] && duck+=("$3")
    "$VENV/bin/python" "$ROOT/bench/verify.py" --etl "$1" "${duck[@]}" \
        --summary "$EXPORT_DIR/manifest-summary.json"
}

# Every mode checks etl's output with bench/verify.py, which reads it with DuckDB; compare also
# times DuckDB itself.
ensure_duckdb

if [ "$mode" = compare ]; then
    generate "$items" export
    # DuckDB first: its output is the reference etl's is checked against. Its row counts must
    # equal the manifest's.
    measure duckdb - "$VENV/bin/python" "$ROOT/bench/duckdb_unwind.py" \
        --data "$EXPORT_DIR/data/*.json.gz" --out "$WORK/duckdb-out"
    duckdb_rows="$(awk 'NF == 2 && $2 ~ /^[0-9]+$/ { s += $2 } END { print s + 0 }' "$WORK/duckdb.log")"
    if [ "$duckdb_rows" != "$ITEM_COUNT" ]; then
        log "DuckDB wrote $duckdb_rows rows, the manifest says $ITEM_COUNT items"
        exit 2
    fi
    # Kept aside: measure() clears NAME-out before each run.
    rm -rf "$WORK/duckdb-ref" && mv "$WORK/duckdb-out" "$WORK/duckdb-ref"
    measure etl "verify_etl '$WORK/etl-out' '$WORK/duckdb-ref'" "$ETL" unwind "$EXPORT_DIR" --out "$WORK/etl-out" -q
    if [ "$MAPPING" != none ]; then
        measure etl-mapped "verify_etl '$WORK/etl-mapped-out' '$WORK/duckdb-ref' --mapped" \
            "$ETL" unwind "$EXPORT_DIR" --out "$WORK/etl-mapped-out" -q --mapping "$MAPPING"
    fi
    measure floor - "$FLOOR" "$EXPORT_DIR"/data/*.json.gz
    floor_lines="$(grep -o 'lines=[0-9]*' "$WORK/floor.log" | cut -d= -f2)"
    if [ "$floor_lines" != "$ITEM_COUNT" ]; then
        log "the floor read $floor_lines lines, the manifest says $ITEM_COUNT items"
        exit 2
    fi

    cores="$(nproc)"
    duck_inproc="$(stat median "${INPROC[duckdb]}")"
    echo
    echo "## etl unwind vs DuckDB $DUCKDB_VERSION: $ITEM_COUNT items, $FILES+1 data files, $cores cores, $RUNS runs each"
    echo
    echo "$HEADER"
    echo "$RULE"
    row "etl unwind (checked: bench/verify.py)" etl "$ITEM_COUNT"
    if [ "$MAPPING" != none ]; then
        row "etl unwind --mapping $(basename "$MAPPING") (checked)" etl-mapped "$ITEM_COUNT"
    fi
    row "duckdb $DUCKDB_VERSION, process" duckdb "$ITEM_COUNT"
    printf '| duckdb %s, in-process (no Python start-up) | %.2f (%.2f-%.2f) | | | %s | %.2f |\n' "$DUCKDB_VERSION" \
        "$duck_inproc" "$(stat min "${INPROC[duckdb]}")" "$(stat max "${INPROC[duckdb]}")" \
        "$(rate "$ITEM_COUNT" "$duck_inproc")" "$(awk -v n="$ITEM_COUNT" -v s="$duck_inproc" 'BEGIN { printf "%.2f", s * 1e6 / n }')"
    row "floor (gunzip + parse)" floor "$ITEM_COUNT"
    echo
    # etl's whole process against DuckDB's in-process time: start-up is charged to etl only.
    wall_ratio="$(ratio "$(median etl)" "$duck_inproc")"
    floor_ratio="$(ratio "$(median floor)" "$(median etl)")"
    echo "- etl wall / duckdb in-process wall (medians): $wall_ratio"
    echo "- etl throughput / floor throughput (medians): $floor_ratio"
    if [ "$MAPPING" != none ]; then
        mapped_ratio="$(ratio "$(median etl-mapped)" "$duck_inproc")"
        mapped_vs="$(ratio "$(median etl-mapped)" "$(median etl)")"
        echo "- etl --mapping wall / duckdb in-process wall (medians): $mapped_ratio"
        echo "- etl --mapping wall / etl wall (medians): $mapped_vs"
    fi
    echo
    check "etl wall / duckdb wall" "$wall_ratio" "<=" 0.33
    check "etl throughput / floor throughput" "$floor_ratio" ">=" 0.50
    check "etl cores used (median)" "$(stat median "${CORES[etl]}")" ">=" "$(cores_target)"
    check "etl peak RSS MiB" "$(mib "${RSS[etl]}")" "<" 1024
    if [ "$MAPPING" != none ]; then
        check "etl --mapping wall / duckdb wall" "$mapped_ratio" "<=" 0.33
        check "etl --mapping wall / etl wall" "$mapped_vs" "<=" 1.00
        check "etl --mapping peak RSS MiB" "$(mib "${RSS[etl-mapped]}")" "<" 1024
    fi
    finish
elif [ "$mode" = uneven ]; then
    # The same items twice: in 3 x BENCH_FILES files of even size, then regrouped by
    # bench/uneven.py into files of 1, 1, ..., 1/4 and 1/2 of the items, the largest last in plan
    # order (a reader taking files in that order reads it alone at the end).
    FILES=$((FILES * 3))
    generate "$items" export-even
    measure etl-even "verify_etl '$WORK/etl-even-out'" "$ETL" unwind "$EXPORT_DIR" --out "$WORK/etl-even-out" -q
    if ! ls "$WORK"/export-uneven/AWSDynamoDB/*/manifest-summary.json >/dev/null 2>&1; then
        "$VENV/bin/python" "$ROOT/bench/uneven.py" "$WORK/export-even" "$WORK/export-uneven"
    fi
    generate "$items" export-uneven
    uneven_files="$(ls "$EXPORT_DIR"/data/*.json.gz | wc -l)"
    measure etl-uneven "verify_etl '$WORK/etl-uneven-out'" "$ETL" unwind "$EXPORT_DIR" --out "$WORK/etl-uneven-out" -q

    echo
    echo "## etl unwind on even and uneven files: $ITEM_COUNT items, $(nproc) cores, $RUNS runs each"
    echo
    echo "$HEADER"
    echo "$RULE"
    row "$FILES+1 files of even size" etl-even "$ITEM_COUNT"
    row "the same items in $uneven_files files, the last with half of them" etl-uneven "$ITEM_COUNT"
    echo
    echo "- uneven wall / even wall (medians): $(ratio "$(median etl-uneven)" "$(median etl-even)")"
    echo
    check "etl cores used on uneven files (median)" "$(stat median "${CORES[etl-uneven]}")" ">=" "$(cores_target)"
    finish
else
    generate "$small" export-small
    small_count="$ITEM_COUNT"
    measure etl-small "verify_etl '$WORK/etl-small-out'" "$ETL" unwind "$EXPORT_DIR" --out "$WORK/etl-small-out" -q
    generate "$large" export-large
    large_count="$ITEM_COUNT"
    measure etl-large "verify_etl '$WORK/etl-large-out'" "$ETL" unwind "$EXPORT_DIR" --out "$WORK/etl-large-out" -q

    echo
    echo "## etl unwind scaling ($FILES+1 data files, $(nproc) cores, $RUNS runs each)"
    echo
    echo "| items | wall s, median (min-max) | cores used | peak RSS MiB | items/s | µs/item |"
    echo "|---:|---:|---:|---:|---:|---:|"
    row "$small_count" etl-small "$small_count"
    row "$large_count" etl-large "$large_count"
    echo
    growth="$(awk -v a="${RSS[etl-small]}" -v b="${RSS[etl-large]}" 'BEGIN { printf "%.1f", (b / a - 1) * 100 }')"
    per_item="$(awk -v a="$(median etl-small)" -v n="$small_count" -v b="$(median etl-large)" -v m="$large_count" \
        'BEGIN { printf "%.1f", ((b / m) / (a / n) - 1) * 100 }')"
    echo "- peak RSS growth: $growth%"
    echo "- time per item growth: $per_item% (0 is linear scaling)"
    echo
    check "peak RSS growth %" "$growth" "<" 20
    check "etl peak RSS MiB at $large_count items" "$(mib "${RSS[etl-large]}")" "<" 1024
    finish
fi
