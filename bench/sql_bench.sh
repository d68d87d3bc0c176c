#!/usr/bin/env bash
# `etl sql` (DataFusion) against DuckDB over the same Parquet files, side by side.
#
# Usage: bench/sql_bench.sh [ITEMS]   (default 4000000)
# Generates an export of ITEMS items, unwinds it, then times two queries with each engine
# (BENCH_RUNS runs each, default 5; median, min and max): a group-by over the largest table
# (`order_item`) and the three-table join of sql/revenue_by_category.sql. etl is timed as a whole
# process (start-up and Parquet metadata included); DuckDB both as a process and in-process
# (from `connect()` to the fetched rows, without Python's start-up). Every run must exit 0, and
# both engines' answers must be equal, value by value (numbers compared as decimals), or no
# figure is reported.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
items="${1:-4000000}"
runs="${BENCH_RUNS:-5}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/etl/target}"
# The export generator and unwinder are always the build's etl; ETL_BIN is the one timed.
build_etl="$CARGO_TARGET_DIR/release/etl"
etl="${ETL_BIN:-$build_etl}"
venv="${ETL_VENV:-$root/.venv}"
py="$venv/bin/python"
work="${BENCH_DIR:-$(mktemp -d /tmp/etl-sqlbench.XXXXXX)}"
# The test build: the same features as `scripts/test`, so nothing is compiled twice.
[ -x "$build_etl" ] || cargo test --release --locked --no-run
[ -x "$py" ] || { python3 -m venv "$venv"; "$py" -m pip install -q -r scripts/requirements-test.txt; }
if [ ! -f "$work/out/_etl/run.json" ]; then
    "$build_etl" sample --out "$work/export" --items "$items" --files 8 --seed 1 >&2
    "$build_etl" unwind "$work/export" --out "$work/out" -q
fi
cat > "$work/groupby.sql" <<'SQL'
SELECT sku, count(*) AS lines, sum(quantity) AS units, sum(quantity * unit_price) AS revenue
FROM order_item GROUP BY sku ORDER BY revenue DESC, sku LIMIT 20;
SQL
cp sql/revenue_by_category.sql "$work/join3.sql"
cat > "$work/duck.py" <<'PY'
import csv, os, sys, time
import duckdb
out, f, answer = sys.argv[1], sys.argv[2], sys.argv[3]
started = time.perf_counter()
con = duckdb.connect()
for t in os.listdir(out):
    if not t.startswith("_etl"):
        con.execute(f"CREATE VIEW \"{t}\" AS SELECT * FROM read_parquet('{out}/{t}/*.parquet')")
cur = con.execute(open(f).read())
rows = cur.fetchall()
took = time.perf_counter() - started
with open(answer, "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow([d[0] for d in cur.description])
    w.writerows(rows)
print(f"{took:.4f}")
PY
cat > "$work/same.py" <<'PY'
# Two CSV answers are equal: same header, same rows in the same order, each cell equal as a
# decimal when both parse as one, as text otherwise.
import csv, sys
from decimal import Decimal, InvalidOperation
def cells(path):
    with open(path, newline="") as fh:
        return list(csv.reader(fh))
def same(a, b):
    try:
        return Decimal(a) == Decimal(b)
    except InvalidOperation:
        return a == b
a, b = cells(sys.argv[1]), cells(sys.argv[2])
if len(a) != len(b) or len(a) < 2:
    sys.exit(f"{len(a) - 1} rows against {len(b) - 1}")
for i, (x, y) in enumerate(zip(a, b)):
    if len(x) != len(y) or not all(same(p, q) for p, q in zip(x, y)):
        sys.exit(f"row {i} differs: {x} against {y}")
print(f"{len(a) - 1} rows agree", file=sys.stderr)
PY
# stat median|min|max NUMBERS...
stat() {
    printf '%s\n' "${@:2}" | sort -g | awk -v k="$1" '
        { v[NR] = $1 }
        END {
            if (k == "min") print v[1]
            else if (k == "max") print v[NR]
            else if (NR % 2) print v[(NR + 1) / 2]
            else print (v[NR / 2] + v[NR / 2 + 1]) / 2
        }'
}
fmt() { printf '%.3f (%.3f-%.3f)' "$(stat median "$@")" "$(stat min "$@")" "$(stat max "$@")"; }
echo "| query | etl sql s, process | DuckDB s, process | DuckDB s, in-process | etl / DuckDB in-process |"
echo "|---|---:|---:|---:|---:|"
for q in groupby join3; do
    e=() d=() di=()
    for _ in $(seq "$runs"); do
        s=$(date +%s.%N)
        if ! "$etl" sql -f "$work/$q.sql" --data "$work/out" --format csv > "$work/$q.etl.csv" 2> "$work/$q.etl.err"; then
            echo "error: etl sql failed on $q:" >&2; cat "$work/$q.etl.err" >&2; exit 2
        fi
        t=$(date +%s.%N); e+=("$(echo "$t - $s" | bc -l)")
        s=$(date +%s.%N)
        if ! inproc=$("$py" "$work/duck.py" "$work/out" "$work/$q.sql" "$work/$q.duck.csv"); then
            echo "error: DuckDB failed on $q" >&2; exit 2
        fi
        t=$(date +%s.%N); d+=("$(echo "$t - $s" | bc -l)"); di+=("$inproc")
        if ! "$py" "$work/same.py" "$work/$q.etl.csv" "$work/$q.duck.csv" 2> "$work/$q.same"; then
            echo "error: the engines disagree on $q: $(cat "$work/$q.same")" >&2; exit 2
        fi
    done
    printf '| %s | %s | %s | %s | %.2f |\n' "$q" "$(fmt "${e[@]}")" "$(fmt "${d[@]}")" "$(fmt "${di[@]}")" \
        "$(echo "$(stat median "${e[@]}") / $(stat median "${di[@]}")" | bc -l)"
done
echo "work folder: $work (answers agreed: $(cat "$work"/*.same | tr '\n' ' '))" >&2
