#!/usr/bin/env bash
# Times a sharded `etl unwind` (`--shard I/N`, both phases, then `etl commit`) against one
# process on the same export and machine, and checks that both outputs hold the same rows.
#
#   bench/shard.sh [ITEMS [SHARDS]]     default 2000000 items, 4 shards
#
# Reported: one process (wall, CPU); each shard's infer and write phase run alone with the
# machine to itself, as one machine of a job array would run it (wall, CPU); all shards of a
# phase at once on this machine; the commit's own time; the committed files; and for
# `--format delta` the commit time and the Delta log's size.
# Environment: CARGO_TARGET_DIR, BENCH_DIR (work folder; default a temporary one, removed at
# the end), BENCH_FILES (data files, default 8), BENCH_SEED (default 1), BENCH_THREADS (threads
# per process, default the CPU count), BENCH_INCREMENTALS (incremental exports after the full
# one, default 0: with K > 0 the sharded and the single run unwind the whole chain) and
# BENCH_CHANGE_PERCENT (items each incremental export changes, default 1).
set -euo pipefail
export LC_ALL=C

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/root/.cache/etl/target}"
ETL="${ETL_BIN:-$CARGO_TARGET_DIR/release/etl}"
ITEMS="${1:-2000000}"
SHARDS="${2:-4}"
FILES="${BENCH_FILES:-8}"
SEED="${BENCH_SEED:-1}"
THREADS="${BENCH_THREADS:-$(nproc)}"
INCS="${BENCH_INCREMENTALS:-0}"
CHANGE="${BENCH_CHANGE_PERCENT:-1}"

log() { echo "bench: $*" >&2; }
if ! /usr/bin/time --version 2>&1 | grep -q GNU; then
    log "installing GNU time (apt-get)"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >&2
fi
if [ -n "${BENCH_DIR:-}" ]; then
    WORK="$BENCH_DIR"
    mkdir -p "$WORK"
else
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/etl-shard-bench.XXXXXX")"
    trap 'rm -rf "$WORK"' EXIT
fi
EXPORT="$WORK/export-$ITEMS"
CHAIN=()
if [ "$INCS" -gt 0 ]; then
    EXPORT="$WORK/chain-$ITEMS-$INCS-$CHANGE"
    CHAIN=(--incrementals "$INCS" --change-percent "$CHANGE")
fi
if ! ls "$EXPORT"/AWSDynamoDB/*/manifest-summary.json >/dev/null 2>&1; then
    log "generating $ITEMS items in $FILES files into $EXPORT ${CHAIN[*]}"
    "$ETL" sample --out "$EXPORT" --items "$ITEMS" --files "$FILES" --seed "$SEED" "${CHAIN[@]}" >&2
fi
cat "$EXPORT"/AWSDynamoDB/*/data/* >/dev/null

# timed LABEL CMD...: runs CMD, appends "LABEL wall user sys maxrss_kb" to $WORK/times.
: >"$WORK/times"
timed() {
    local label="$1"
    shift
    /usr/bin/time -o "$WORK/t" -f "%e %U %S %M" "$@" >/dev/null 2>"$WORK/err" || {
        cat "$WORK/err" >&2
        exit 1
    }
    echo "$label $(cat "$WORK/t")" >>"$WORK/times"
}

run_all() { # FORMAT
    local fmt="$1" single="$WORK/single-$1" sharded="$WORK/sharded-$1"
    rm -rf "$single" "$sharded"
    timed "$fmt.single" "$ETL" unwind "$EXPORT" --out "$single" --threads "$THREADS" --format "$fmt"
    for phase in infer write; do
        for i in $(seq 0 $((SHARDS - 1))); do
            timed "$fmt.$phase.$i" "$ETL" unwind "$EXPORT" --out "$sharded" --threads "$THREADS" --format "$fmt" \
                --shard "$i/$SHARDS" --phase "$phase"
        done
    done
    timed "$fmt.commit" "$ETL" commit "$sharded"
    # The same shards again, every shard of a phase at once on this machine.
    rm -rf "$sharded"
    for phase in infer write; do
        local start pids=()
        start=$EPOCHREALTIME
        for i in $(seq 0 $((SHARDS - 1))); do
            "$ETL" unwind "$EXPORT" --out "$sharded" --threads "$THREADS" --format "$fmt" \
                --shard "$i/$SHARDS" --phase "$phase" 2>/dev/null &
            pids+=($!)
        done
        for p in "${pids[@]}"; do wait "$p"; done
        echo "$fmt.concurrent.$phase $start $EPOCHREALTIME" >>"$WORK/spans"
    done
    timed "$fmt.commit2" "$ETL" commit "$sharded"
    # Same rows in both outputs (row counts per table and every table's rows, through etl sql).
    for t in $(ls "$single" | grep -v '^_etl$'); do
        a=$("$ETL" sql --data "$single" --format csv "SELECT count(*) FROM \"$t\"" 2>/dev/null)
        b=$("$ETL" sql --data "$sharded" --format csv "SELECT count(*) FROM \"$t\"" 2>/dev/null)
        [ "$a" = "$b" ] || { log "table $t: $a rows in one run, $b sharded"; exit 1; }
    done
    echo "$fmt.files $(find "$single" -name '*.parquet' -not -path '*/_etl/*' | wc -l) $(find "$sharded" -name '*.parquet' -not -path '*/_etl/*' | wc -l)" >>"$WORK/counts"
    if [ "$fmt" = delta ]; then
        echo "delta.log_bytes $(du -cb "$sharded"/*/_delta_log | tail -1 | cut -f1) $(du -cb "$single"/*/_delta_log | tail -1 | cut -f1)" >>"$WORK/counts"
    fi
}

: >"$WORK/counts"
: >"$WORK/spans"
run_all parquet
run_all delta

python3 - "$WORK/times" "$WORK/counts" "$ITEMS" "$SHARDS" "$WORK/spans" "$INCS" <<'EOF'
import sys
times = {}
for line in open(sys.argv[1]):
    label, wall, user, sys_, rss = line.split()
    times[label] = (float(wall), float(user) + float(sys_), int(rss) // 1024)
counts = {l.split()[0]: l.split()[1:] for l in open(sys.argv[2])}
for line in open(sys.argv[5]):
    label, start, end = line.split()
    times[label] = (float(end) - float(start), 0.0, 0)
items, n = int(sys.argv[3]), int(sys.argv[4])
print(f"{items:,} items, {n} shards" + (f", a chain of {sys.argv[6]} incremental exports" if sys.argv[6] != "0" else ""))
print(f"{'':28} {'wall s':>8} {'cpu s':>8} {'RSS MiB':>8}")
for fmt in ("parquet", "delta"):
    s = times[f"{fmt}.single"]
    print(f"{fmt + ': one process':28} {s[0]:8.2f} {s[1]:8.2f} {s[2]:8}")
    for phase in ("infer", "write"):
        ph = [times[f"{fmt}.{phase}.{i}"] for i in range(n)]
        print(f"{'  shard ' + phase + ', slowest':28} {max(p[0] for p in ph):8.2f} {max(p[1] for p in ph):8.2f} {max(p[2] for p in ph):8}")
        print(f"{'  shard ' + phase + ', all shards':28} {sum(p[0] for p in ph):8.2f} {sum(p[1] for p in ph):8.2f}")
    c = times[f"{fmt}.commit"]
    print(f"{'  commit':28} {c[0]:8.2f} {c[1]:8.2f} {c[2]:8}")
    job_array = max(times[f"{fmt}.infer.{i}"][0] for i in range(n)) + max(times[f"{fmt}.write.{i}"][0] for i in range(n)) + c[0]
    cpu = sum(times[f"{fmt}.{p}.{i}"][1] for p in ("infer", "write") for i in range(n)) + c[1]
    conc = times[f"{fmt}.concurrent.infer"][0] + times[f"{fmt}.concurrent.write"][0] + times[f"{fmt}.commit2"][0]
    print(f"{'  job array of ' + str(n) + ' machines':28} {job_array:8.2f} {cpu:8.2f}   (slowest infer + slowest write + commit; cpu: all shards)")
    print(f"{'  all shards on this machine':28} {conc:8.2f}            (each phase's shards at once, then the commit)")
    print(f"  speed-up over one process on {n} machines: {s[0] / job_array:.2f}x; cpu cost {cpu / s[1]:.2f}x")
    f = counts[f"{fmt}.files"]
    print(f"  parquet files: one process {f[0]}, sharded {f[1]}")
    if fmt == "delta":
        d = counts["delta.log_bytes"]
        print(f"  Delta logs: sharded {int(d[0]):,} bytes, one process {int(d[1]):,} bytes")
EOF
