#!/usr/bin/env bash
# The hot path's A/B guard: a base revision against the working tree, under the same load, run
# alternated (base, head, head, base, ...) in one invocation so that both see the same machine in
# the same minutes. Run it before landing a change on a per-frame path.
#
#   benches/ab.sh main                              # 1,000 sessions, 60 s, one pair
#   benches/ab.sh 4ac0f0b --sessions 500 --pairs 2 --duration 30s
#   benches/ab.sh main --instructions               # instruction counts under callgrind instead
#
# The base is checked out in a git worktree of its own (target/ab/src-REV) and built in release
# beside the tree's own release build (same target folder, so dependencies build once); both
# gateways are driven by the head's `livegate-loadtest`, with the load of docs/PERFORMANCE.md:
#
#   livegate --sim-pacing burst --sim-reply-delay-ms 0 --sim-chunk-ms 200 --data-dir FRESH
#   livegate-loadtest --sessions N --duration D --ramp 100 --server-pid PID
#
# It prints each run (turns, errors, gateway CPU seconds, cores with every session connected, the
# gateway's own first-audio p99) and the head's ratios to the base's means, with the spread of
# each side's runs; when the spreads overlap, the difference is within the machine's noise.
#
# `--instructions` runs each gateway under valgrind's callgrind instead (a few sessions for a fixed
# number of turns, default 4 x 3) and prints the instructions it executed per completed turn: a
# figure that other work on the machine does not move, for a noisy machine or a small change.
# The callgrind files stay in the output folder for `callgrind_annotate`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

usage() { sed -n '2,9p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
rev=$1; shift
sessions=1000 duration=60s pairs=1 ramp=100 instructions=0 turns=3 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sessions) sessions=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --ramp) ramp=$2; shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --instructions) instructions=1; shift ;;
    *) echo "unknown option $1" >&2; usage ;;
  esac
done
if [ "$instructions" = 1 ] && [ "$sessions" = 1000 ]; then sessions=4; fi
base_sha=$(git rev-parse --short=7 "$rev^{commit}")
out=${out:-$root/target/ab/runs-$base_sha}
bins=$root/target/ab/bin
mkdir -p "$out" "$bins"

# The base: its own worktree, built into the tree's target folder; its binary set aside before
# the head's build writes target/release/livegate again.
# A revision does not change, so its binary is built once: the next run goes straight to the head.
src=$root/target/ab/src-$base_sha
if [ ! -x "$bins/livegate-$base_sha" ]; then
  if [ ! -e "$src/Cargo.toml" ]; then
    git worktree add --detach --force "$src" "$base_sha" >&2
  fi
  echo "== building $base_sha (release) in $src" >&2
  CARGO_TARGET_DIR=$root/target cargo build --release --quiet --manifest-path "$src/Cargo.toml" \
    --bin livegate
  cp "$root/target/release/livegate" "$bins/livegate-$base_sha.part"
  mv "$bins/livegate-$base_sha.part" "$bins/livegate-$base_sha"
fi
echo "== building the working tree (release)" >&2
# The whole workspace, as `cargo build --release --workspace` and the other bench scripts build
# it: a subset resolves dependencies' features differently and rebuilds them each time.
cargo build --release --quiet --workspace
cp "$root/target/release/livegate" "$bins/livegate-head"
loadtest=$root/target/release/livegate-loadtest
echo "== base: $("$bins/livegate-$base_sha" --version); head: $("$bins/livegate-head" --version)" >&2

pid=""
cleanup() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits (at most 120 s: callgrind starts slowly) until the gateway answers /healthz.
wait_http() {
  for _ in $(seq 1 600); do
    curl -s -o /dev/null "http://127.0.0.1:$1/healthz" && return 0
    sleep 0.2
  done
  echo "nothing answered on port $1" >&2; return 1
}

# run SIDE N: one load test against a fresh gateway (SIDE is base or head); the report in
# $out/SIDE-N.json.
run() {
  local side=$1 n=$2 bin port data
  bin=$bins/livegate-$([ "$side" = base ] && echo "$base_sha" || echo head)
  port=$(free_port)
  data=$(mktemp -d "$out/data-XXXXXX")
  local gateway=("$bin" --bind "127.0.0.1:$port" --data-dir "$data" --sim-pacing burst
    --sim-reply-delay-ms 0 --sim-chunk-ms 200)
  local load=(--sessions "$sessions" --duration "$duration" --ramp "$ramp")
  if [ "$instructions" = 1 ]; then
    gateway=(valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.$side-$n" "${gateway[@]}")
    load=(--sessions "$sessions" --turns "$turns" --duration 600s --ramp "$ramp")
  fi
  "${gateway[@]}" >"$out/$side-$n.log" 2>&1 &
  pid=$!
  wait_http "$port"
  # Startup is not what is compared: counting starts with the load.
  if [ "$instructions" = 1 ]; then callgrind_control -z "$pid" >/dev/null; fi
  echo "== $side ($n), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "$loadtest" --url "ws://127.0.0.1:$port/ws" "${load[@]}" --server-pid "$pid" --quiet \
    --report "$out/$side-$n.json" >"$out/$side-$n.txt" 2>&1 || true
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
  rm -rf "$data"
}

order=()
for i in $(seq 1 "$pairs"); do order+=("base $((2 * i - 1))" "head $((2 * i - 1))" "head $((2 * i))" "base $((2 * i))"); done
for step in "${order[@]}"; do
  # shellcheck disable=SC2086
  run $step
done

python3 - "$out" "$base_sha" "$instructions" <<'EOF'
import glob, json, os, re, statistics, sys

out, base, instructions = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

def runs(side):
    found = []
    for path in sorted(glob.glob(f"{out}/{side}-*.json"), key=lambda p: int(re.findall(r"(\d+)\.json$", p)[0])):
        n = re.findall(r"(\d+)\.json$", path)[0]
        with open(path) as f:
            report = json.load(f)
        server = report.get("server") or {}
        own = ((report.get("gateway") or {}).get("first_audio_ms") or {}).get("p99")
        row = {
            "run": f"{side} {n}",
            "turns": report["turns_completed"],
            "errors": report["errors"],
            "cpu": server.get("cpu_seconds"),
            "cores": server.get("cpu_cores_at_peak"),
            "p99": own,
        }
        if instructions:
            row["ir"] = None
            dump = f"{out}/callgrind.{side}-{n}"
            if os.path.exists(dump):
                with open(dump) as f:
                    for line in f:
                        if line.startswith("summary:") or line.startswith("totals:"):
                            row["ir"] = int(line.split()[1])
            if row["ir"] and row["turns"]:
                row["ir_per_turn"] = row["ir"] / row["turns"]
        found.append(row)
    return found

def fmt(v, spec):
    return "–" if v is None else format(v, spec)

rows = {"base": runs("base"), "head": runs("head")}
if instructions:
    print(f"{'run':<8} {'turns':>6} {'errors':>6} {'instructions':>15} {'per turn':>12}")
    for r in rows["base"] + rows["head"]:
        print(f"{r['run']:<8} {r['turns']:>6} {r['errors']:>6} {fmt(r['ir'], ',d'):>15} {fmt(r.get('ir_per_turn'), ',.0f'):>12}")
    metrics = [("instructions per turn", "ir_per_turn", ",.0f")]
else:
    print(f"{'run':<8} {'turns':>6} {'errors':>6} {'CPU s':>7} {'cores':>6} {'own p99 ms':>10}")
    for r in rows["base"] + rows["head"]:
        print(f"{r['run']:<8} {r['turns']:>6} {r['errors']:>6} {fmt(r['cpu'], '.1f'):>7} {fmt(r['cores'], '.2f'):>6} {fmt(r['p99'], '.2f'):>10}")
    metrics = [("gateway CPU s", "cpu", ".1f"), ("cores all connected", "cores", ".2f"), ("own first-audio p99 ms", "p99", ".2f")]
print()
print(f"{'head / base ' + base:<26} {'base mean (min–max)':>24} {'head mean (min–max)':>24} {'ratio':>7}")
for name, key, spec in metrics:
    sides = {s: [r[key] for r in rows[s] if r.get(key) is not None] for s in rows}
    if not sides["base"] or not sides["head"]:
        continue
    cells = {}
    for s, v in sides.items():
        cells[s] = f"{format(statistics.mean(v), spec)} ({format(min(v), spec)}–{format(max(v), spec)})"
    ratio = statistics.mean(sides["head"]) / statistics.mean(sides["base"])
    overlap = max(sides["base"]) >= min(sides["head"]) and max(sides["head"]) >= min(sides["base"])
    note = "spreads overlap" if overlap else ("head higher" if ratio > 1 else "head lower")
    print(f"{name:<26} {cells['base']:>24} {cells['head']:>24} {ratio:>6.3f}×  {note}")
EOF
echo "load average now $(cut -d' ' -f1-3 /proc/loadavg); reports in $out" >&2
