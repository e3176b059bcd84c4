#!/usr/bin/env bash
# CAS ingest benchmark: `vaultctl cas put` into a fresh vaultd (Unix socket, gRPC) against
# `sha256sum` and `cp -r` + `sync` of the same files, then find_missing_bench. See bench/README.md.
#
#   bench/cas_ingest.sh
#   INGEST_MB=64 SMALL_COUNT=2000 BENCH_MIN_TIME=0.2 bench/cas_ingest.sh    # a quick run
#
# Environment:
#   VAULT_BUILD_DIR  build tree with node/vaultd, vaultctl/vaultctl, bench/find_missing_bench
#                    (default <repo>/build; deploy/build.sh builds them when one is missing)
#   INGEST_MB        large data set: this many files of 1 MiB random data (default 1024)
#   SMALL_COUNT      small data set: this many files of 4 KiB random data (default 50000)
#   SHA_RUNS         hyperfine runs of sha256sum per data set (default 3)
#   FM_PRELOAD       objects find_missing_bench preloads into its vault (default 10000)
#   BENCH_MIN_TIME   --benchmark_min_time (seconds) for find_missing_bench (default 2)
#   BENCH_TMPDIR     where the temporary directory goes (default $TMPDIR or /tmp); all data,
#                    copies and vaults live there, on one file system
#
# Nothing is dropped from the page cache: every data set is written, synced and read once before
# timing, so all three methods read from memory and what is compared is the work each does.
#
# After its tables it prints one BENCH_RESULT line (bench/bench_result.h) per target, for
# bench/run: each data set's MB/s beside sha256sum's, 4 KiB objects/s, FindMissing p50 per case.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${VAULT_BUILD_DIR:-$root/build}
ingest_mb=${INGEST_MB:-1024}
small_count=${SMALL_COUNT:-50000}
sha_runs=${SHA_RUNS:-3}
fm_preload=${FM_PRELOAD:-10000}
bench_min_time=${BENCH_MIN_TIME:-2}
small_bytes=4096
target_ratio=0.6
target_small_objs=50000
target_fm_ms=20

vaultd="$build/node/vaultd"
vaultctl="$build/vaultctl/vaultctl"
fm_bench="$build/bench/find_missing_bench"

log() { echo "cas_ingest: $*" >&2; }

for b in "$vaultd" "$vaultctl" "$fm_bench"; do
  if [[ ! -x "$b" ]]; then
    log "building (missing $b)"
    VAULT_BUILD_DIR="$build" VAULT_BUILD_TARGETS="vaultd vaultctl find_missing_bench" \
      "$root/deploy/build.sh" >&2
    break
  fi
done

work=$(mktemp -d "${BENCH_TMPDIR:-${TMPDIR:-/tmp}}/cas-ingest.XXXXXX")
vault_pids=()
alive() {  # is process $1 running (not exited, not a zombie waiting to be reaped)?
  local state
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $state && $state != Z ]]
}
stop_vault() {  # SIGTERM one vaultd we started, wait for it (SIGKILL after 15 s)
  local pid=$1
  if alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  for pid in "${vault_pids[@]}"; do stop_vault "$pid"; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_vault NAME: creates a fresh vault in $work/NAME, starts vaultd, waits for its ready file.
# Sets vault_sock and vault_pid.
start_vault() {
  local name=$1 dir="$work/$1"
  # The listener must have a real port: `init --listen 127.0.0.1:0` is refused by config
  # validation (port must be 1..65535). Only the Unix socket is used here.
  "$vaultctl" init --name "$name" --dir "$dir" --listen "127.0.0.1:$(free_port)" >/dev/null
  "$vaultd" --config "$dir/vault.conf" --log-level warn >"$dir/vaultd.log" 2>&1 </dev/null &
  vault_pid=$!
  vault_pids+=("$vault_pid")
  local ready="$dir/data/vaultd.ready"
  for _ in $(seq 1 200); do
    [[ -f "$ready" ]] && break
    alive "$vault_pid" || break
    sleep 0.05
  done
  if [[ ! -f "$ready" ]]; then
    log "vaultd for $name did not start; its log:"
    tail -n 20 "$dir/vaultd.log" >&2
    exit 1
  fi
  vault_sock=$(sed -n 's/.*"admin_socket": "\([^"]*\)".*/\1/p' "$ready")
}

# bench_result KEY=VALUE...: prints one BENCH_RESULT line (the fields of bench/bench_result.h;
# issue, value, baseline, ratio and target are numbers, "" is null; ratio defaults to
# value / baseline).
bench_result() {
  python3 - "$@" <<'PY'
import json, sys
numbers = {"issue", "value", "baseline", "ratio", "target"}
r = {"bench": "cas_ingest"}
for arg in sys.argv[1:]:
    k, v = arg.split("=", 1)
    r[k] = (float(v) if v != "" else None) if k in numbers else v
r["issue"] = int(r.get("issue") or 0)
if r.get("ratio") is None and r.get("value") is not None and r.get("baseline"):
    r["ratio"] = r["value"] / r["baseline"]
print("BENCH_RESULT " + json.dumps(r, separators=(",", ":")))
PY
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
clk_tck=$(getconf CLK_TCK)
# CPU seconds (user + system) a running process has used so far.
proc_cpu() { awk -v hz="$clk_tck" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat"; }

# timed OUT ERR CMD...: runs CMD once with stdout/stderr to OUT/ERR. Sets t_wall (seconds, from
# date +%s.%N) and t_cpu (user + system seconds of CMD and its children, from bash's `time`).
timed() {
  local out=$1 err=$2 t0 t1 TIMEFORMAT='%3U %3S'
  shift 2
  t0=$(now)
  { time "$@" >"$out" 2>"$err"; } 2>"$work/time"
  t1=$(now)
  t_wall=$(elapsed "$t0" "$t1")
  t_cpu=$(awk '{ printf "%.3f", $1 + $2 }' "$work/time")
}

# mean_timed CMD: CMD (a shell command line) once to warm up, then $sha_runs times; sets t_wall
# and t_cpu to the means. Uses hyperfine when present.
mean_timed() {
  local cmd=$1
  if command -v hyperfine >/dev/null; then
    hyperfine --runs "$sha_runs" --warmup 1 --style none --export-csv "$work/hf.csv" "$cmd" \
      >"$work/hf.out" 2>&1 || { cat "$work/hf.out" >&2; exit 1; }
    # command,mean,stddev,median,user,system,min,max
    t_wall=$(awk -F, 'NR == 2 { printf "%.3f", $2 }' "$work/hf.csv")
    t_cpu=$(awk -F, 'NR == 2 { printf "%.3f", $5 + $6 }' "$work/hf.csv")
  else
    bash -c "$cmd"
    local wall=0 cpu=0
    for _ in $(seq 1 "$sha_runs"); do
      timed /dev/null /dev/null bash -c "$cmd"
      wall=$(awk -v a="$wall" -v b="$t_wall" 'BEGIN { print a + b }')
      cpu=$(awk -v a="$cpu" -v b="$t_cpu" 'BEGIN { print a + b }')
    done
    t_wall=$(awk -v t="$wall" -v n="$sha_runs" 'BEGIN { printf "%.3f", t / n }')
    t_cpu=$(awk -v t="$cpu" -v n="$sha_runs" 'BEGIN { printf "%.3f", t / n }')
  fi
}

# make_data DIR FILES BYTES_EACH: FILES files of random data (one stream, split), synced, then
# read once so they are in the page cache.
make_data() {
  local dir=$1 files=$2 each=$3
  mkdir -p "$dir"
  head -c $((files * each)) /dev/urandom | split -b "$each" -a 6 -d - "$dir/f"
  sync -f "$dir"
  find "$dir" -type f -print0 | xargs -0 cat >/dev/null
}

rows=()  # table rows: set|method|seconds|cpu seconds|bytes|files
results=()  # BENCH_RESULT lines, printed at the end
declare -A put_seconds=()
notes=()
verdicts=()
# run_set LABEL DIR FILES BYTES_EACH
run_set() {
  local label=$1 dir=$2 files=$3 each=$4 bytes=$(($3 * $4))
  local name="ingest-$4-$3" s_sha c_sha s_cp c_cp s_put c_put d0 d1 stored

  log "$label: sha256sum, 1 warm-up + $sha_runs runs"
  mean_timed "find '$dir' -type f -print0 | xargs -0 sha256sum >/dev/null"
  s_sha=$t_wall c_sha=$t_cpu

  log "$label: cp -r + sync -f"
  # shellcheck disable=SC2016  # $1/$2 are expanded by the inner bash
  timed /dev/null "$work/cp.err" bash -c 'cp -r "$1" "$2" && sync -f "$2"' _ "$dir" "$work/copy"
  s_cp=$t_wall c_cp=$t_cpu
  rm -rf "$work/copy"
  sync -f "$work"

  log "$label: vaultctl cas put into a fresh vault"
  start_vault "$name"
  d0=$(proc_cpu "$vault_pid")
  timed "$work/put.out" "$work/put.err" "$vaultctl" --vault "$vault_sock" cas put "$dir" ||
    { log "vaultctl cas put failed:"; tail -n 5 "$work/put.err" >&2; exit 1; }
  d1=$(proc_cpu "$vault_pid")
  s_put=$t_wall
  c_put=$(awk -v a="$t_cpu" -v b="$d0" -v c="$d1" 'BEGIN { printf "%.3f", a + c - b }')
  stored=$("$vaultctl" --vault "$vault_sock" -o json status |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["objects"])')
  if [[ $stored != "$files" ]]; then
    log "$label: the vault stores $stored objects, expected $files"
    exit 1
  fi
  stop_vault "$vault_pid"
  rm -rf "${work:?}/$name"

  put_seconds[$label]=$s_put
  rows+=("$label|sha256sum|$s_sha|$c_sha|$bytes|$files"
         "$label|cp -r + sync|$s_cp|$c_cp|$bytes|$files"
         "$label|vaultctl cas put|$s_put|$c_put|$bytes|$files")
  notes+=("$(awk -v l="$label" -v c="$t_cpu" -v d="$d0" -v e="$d1" -v sha="$c_sha" \
      -v cores="$(nproc)" 'BEGIN {
    v = c + e - d
    printf "%-16s CPU s vaultctl %.2f + vaultd %.2f; sha256sum/vault CPU %.2f: on %d cores", l, c, e - d, sha / v, cores
    printf " vaultctl reaches at most %.2f x sha256sum", sha / v * cores }')")
  local mbs_put mbs_sha mbs_cp size_id=1MiB size_name="1 MiB"
  mbs_put=$(awk -v b="$bytes" -v s="$s_put" 'BEGIN { printf "%.6g", b / s / 1e6 }')
  mbs_sha=$(awk -v b="$bytes" -v s="$s_sha" 'BEGIN { printf "%.6g", b / s / 1e6 }')
  mbs_cp=$(awk -v b="$bytes" -v s="$s_cp" 'BEGIN { printf "%.1f", b / s / 1e6 }')
  if [[ $each == "$small_bytes" ]]; then size_id=4KiB size_name="4 KiB"; fi
  results+=("$(bench_result metric="cas.ingest.$size_id" issue=2 \
    label="vaultctl cas put, $files x $size_name" value="$mbs_put" unit=MB/s \
    baseline="$mbs_sha" baseline_name="sha256sum, same files" target="$target_ratio" \
    target_on=ratio better=higher \
    note="cp -r + sync $mbs_cp MB/s; CPU s vaultctl + vaultd $c_put, sha256sum $c_sha")")
  if [[ $each == "$small_bytes" ]]; then
    results+=("$(bench_result metric=cas.ingest.4KiB.objects issue=2 \
      label="vaultctl cas put, $files x 4 KiB, objects/s" \
      value="$(awk -v n="$files" -v s="$s_put" 'BEGIN { printf "%.6g", n / s }')" \
      unit=objects/s \
      baseline="$(awk -v n="$files" -v s="$s_sha" 'BEGIN { printf "%.6g", n / s }')" \
      baseline_name="sha256sum, same files" target="$target_small_objs" target_on=value \
      better=higher)")
  fi
  verdicts+=("$(awk -v l="$label" -v put="$s_put" -v sha="$s_sha" -v cp="$s_cp" -v n="$files" \
      -v t="$target_ratio" -v small="$([[ $each == "$small_bytes" ]] && echo 1 || echo 0)" \
      -v tobj="$target_small_objs" 'BEGIN {
    r = sha / put; ok = r >= t
    line = sprintf("%-16s vaultctl/sha256sum %.2f (target >= %.2f)  vaultctl/cp+sync %.2f", l, r, t, cp / put)
    if (small) {
      o = n / put; ok = ok && o >= tobj
      line = line sprintf("  objects/s %.0f (target >= %d)", o, tobj)
    }
    print line "  " (ok ? "PASS" : "BELOW")
  }')")
}

log "work dir $work ($(stat -f -c %T "$work")); nothing is dropped from the page cache"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

large_label="${ingest_mb}x1MiB"
small_label="${small_count}x4KiB"
log "generating $large_label and $small_label of random data"
make_data "$work/large" "$ingest_mb" $((1 << 20))
make_data "$work/small" "$small_count" "$small_bytes"
run_set "$large_label" "$work/large" "$ingest_mb" $((1 << 20))
run_set "$small_label" "$work/small" "$small_count" "$small_bytes"
rm -rf "$work/large" "$work/small"

log "find_missing_bench: fresh vault, --preload=$fm_preload"
start_vault findmissing
"$fm_bench" --vault="unix:$vault_sock" --preload="$fm_preload" --server_pid="$vault_pid" \
  --benchmark_min_time="$bench_min_time" \
  --benchmark_out="$work/fm.json" --benchmark_out_format=json >"$work/fm.txt" 2>&1 ||
  { cat "$work/fm.txt" >&2; exit 1; }
stop_vault "$vault_pid"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "CAS ingest: $(nproc) cores, $(uname -r), build $(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' \
  "$build/CMakeCache.txt" 2>/dev/null), load average before $load_before, after $load_after"
echo "MB = 10^6 bytes; files in the page cache (warm); vault defaults (sync_writes on)."
echo "seconds: wall time (sha256sum: mean of $sha_runs runs); CPU s: user + system of the method's"
echo "processes (vaultctl row: vaultctl + vaultd until put returned; cp row: not the kernel's"
echo "writeback);"
echo "vaultctl/method: vaultctl cas put speed / that method's speed."
echo
printf '%-16s %-18s %9s %10s %11s %8s %16s\n' "data set" "method" "seconds" "MB/s" "objects/s" \
  "CPU s" "vaultctl/method"
for row in "${rows[@]}"; do
  IFS='|' read -r set method secs cpu bytes files <<<"$row"
  awk -v set="$set" -v m="$method" -v s="$secs" -v c="$cpu" -v b="$bytes" -v n="$files" \
    -v p="${put_seconds[$set]}" 'BEGIN {
    printf "%-16s %-18s %9.3f %10.1f %11.0f %8.2f %16.2f\n", set, m, s, b / s / 1e6, n / s, c, s / p }'
done
echo
for v in "${notes[@]}" "${verdicts[@]}"; do echo "$v"; done
echo
echo "find_missing_bench (10,000 digests per FindMissing; BatchPut 1000 x 4 KiB per call):"
grep -E '^(BM_|Benchmark|-)' "$work/fm.txt"
python3 - "$work/fm.json" "$target_fm_ms" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
target = float(sys.argv[2])
for r in runs:
    if not r["name"].startswith("BM_FindMissing"):
        continue
    case = r["name"].split("/")[1]
    ok = r["p50_ms"] <= target
    cpu = r.get("server_cpu_ms", float("nan"))
    print(f"FindMissing {case:<12} p50 {r['p50_ms']:6.1f} ms  p99 {r['p99_ms']:6.1f} ms  "
          f"mean {r['real_time']:6.1f} ms  vaultd CPU/call {cpu:5.1f} ms  "
          f"(target p50 <= {target:g} ms)  {'PASS' if ok else 'BELOW'}")
PY
echo
for line in "${results[@]}"; do echo "$line"; done
python3 - "$work/fm.json" "$target_fm_ms" <<'PY'
import json, math, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
for r in runs:
    if not r["name"].startswith("BM_FindMissing"):
        continue
    case = r["name"].split("/")[1]
    cpu = r.get("server_cpu_ms")
    note = f"p99 {r['p99_ms']:.1f} ms"
    if cpu is not None and math.isfinite(cpu):
        note += f"; vaultd CPU {cpu:.1f} ms per call"
    print("BENCH_RESULT " + json.dumps({
        "bench": "cas_ingest", "metric": f"cas.find_missing.{case}.p50", "issue": 2,
        "label": f"FindMissing of 10,000 digests, {case.replace('_', ' ')}, p50",
        "value": r["p50_ms"], "unit": "ms", "baseline": None, "baseline_name": "",
        "ratio": None, "target": float(sys.argv[2]), "target_on": "value", "better": "lower",
        "note": note}, separators=(",", ":")))
PY
