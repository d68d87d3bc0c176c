#!/usr/bin/env bash
# `etl sql` (DataFusion) against DuckDB over the same Parquet files, side by side.
#
# Usage: bench/sql_bench.sh [ITEMS]   (default 4000000)
# Generates an export of ITEMS items, unwinds it, then times two queries with each engine
# (best of BENCH_RUNS, default 3): a group-by over the largest table (`order_item`) and the
# three-table join of sql/revenue_by_category.sql. Both engines start cold as processes, so the
# times include start-up and reading Parquet metadata.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
items="${1:-4000000}"
runs="${BENCH_RUNS:-3}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/etl/target}"
etl="${ETL_BIN:-$CARGO_TARGET_DIR/release/etl}"
py="${ETL_VENV:-$root/.venv}/bin/python"
work="${BENCH_DIR:-$(mktemp -d /tmp/etl-sqlbench.XXXXXX)}"
[ -x "$etl" ] || cargo build --release --all-targets
[ -x "$py" ] || { python3 -m venv "${ETL_VENV:-$root/.venv}"; "$py" -m pip install -q -r scripts/requirements-test.txt; }
if [ ! -f "$work/out/_etl/run.json" ]; then
    "$etl" sample --out "$work/export" --items "$items" --files 8 --seed 1 >&2
    "$etl" unwind "$work/export" --out "$work/out" -q
fi
cat > "$work/groupby.sql" <<'SQL'
SELECT sku, count(*) AS lines, sum(quantity) AS units, sum(quantity * unit_price) AS revenue
FROM order_item GROUP BY sku ORDER BY revenue DESC, sku LIMIT 20;
SQL
cp sql/revenue_by_category.sql "$work/join3.sql"
cat > "$work/duck.py" <<'PY'
import os, sys, time, duckdb
out, f = sys.argv[1], sys.argv[2]
con = duckdb.connect()
for t in os.listdir(out):
    if not t.startswith("_etl"):
        con.execute(f"CREATE VIEW \"{t}\" AS SELECT * FROM read_parquet('{out}/{t}/*.parquet')")
rows = con.execute(open(f).read()).fetchall()
print(len(rows), file=sys.stderr)
PY
best() { # best wall time of $runs runs of "$@"
    local b=""
    for _ in $(seq "$runs"); do
        local s e t
        s=$(date +%s.%N); "$@" > /dev/null 2>&1; e=$(date +%s.%N)
        t=$(echo "$e - $s" | bc -l)
        if [ -z "$b" ] || [ "$(echo "$t < $b" | bc -l)" = 1 ]; then b=$t; fi
    done
    printf '%.3f' "$b"
}
echo "| query | etl sql (DataFusion) s | DuckDB s | ratio |"
echo "|---|---:|---:|---:|"
for q in groupby join3; do
    a=$(best "$etl" sql -f "$work/$q.sql" --data "$work/out" --format csv)
    b=$(best "$py" "$work/duck.py" "$work/out" "$work/$q.sql")
    printf '| %s | %s | %s | %.2f |\n' "$q" "$a" "$b" "$(echo "$a / $b" | bc -l)"
done
echo "work folder: $work" >&2
