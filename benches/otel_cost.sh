#!/usr/bin/env bash
# What exporting traces costs: the same release gateway with `--otel` off and on (every call
# sampled), under the load of docs/PERFORMANCE.md, run alternated (off, on, on, off, ...) in one
# invocation so both see the same machine in the same minutes (the method of benches/ab.sh).
#
#   benches/otel_cost.sh                              # 1,000 sessions, 60 s, one pair
#   benches/otel_cost.sh --sessions 500 --pairs 2 --duration 30s
#
# With tracing on, the gateway exports to a loopback OTLP sink (a Python HTTP server answering
# every POST with 200; its CPU is its own process's, not the gateway's). Prints each run (turns,
# errors, gateway CPU seconds, the gateway's own first-audio p99) and on's ratios to off's means.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

sessions=1000 duration=60s pairs=1 ramp=100 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sessions) sessions=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --ramp) ramp=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) sed -n '2,8p' "$0" >&2; exit 2 ;;
  esac
done
out=${out:-$root/target/otel-cost}
mkdir -p "$out"
echo "== building (release)" >&2
cargo build --release --quiet --workspace
bin=$root/target/release/livegate
loadtest=$root/target/release/livegate-loadtest

pid="" sink=""
cleanup() {
  for p in $pid $sink; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() {
  for _ in $(seq 1 600); do
    curl -s -o /dev/null "http://127.0.0.1:$1/$2" && return 0
    sleep 0.2
  done
  echo "nothing answered on port $1" >&2; return 1
}

sink_port=$(free_port)
python3 - "$sink_port" >"$out/sink.log" 2>&1 <<'EOF' &
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
EOF
sink=$!
wait_http "$sink_port" ""

# run SIDE N: one load test against a fresh gateway (SIDE is off or on); the report in
# $out/SIDE-N.json.
run() {
  local side=$1 n=$2 port data
  port=$(free_port)
  data=$(mktemp -d "$out/data-XXXXXX")
  local otel=false
  [ "$side" = on ] && otel=true
  LIVEGATE_OTEL=$otel OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$sink_port" \
    OTEL_TRACES_SAMPLER=always_on \
    "$bin" --bind "127.0.0.1:$port" --data-dir "$data" --sim-pacing burst \
    --sim-reply-delay-ms 0 --sim-chunk-ms 200 >"$out/$side-$n.log" 2>&1 &
  pid=$!
  wait_http "$port" healthz
  echo "== $side ($n), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "$loadtest" --url "ws://127.0.0.1:$port/ws" --sessions "$sessions" --duration "$duration" \
    --ramp "$ramp" --server-pid "$pid" --quiet --report "$out/$side-$n.json" \
    >"$out/$side-$n.txt" 2>&1 || true
  curl -s "http://127.0.0.1:$port/metrics" | grep '^livegate_trace_' >"$out/$side-$n.metrics" || true
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
  rm -rf "$data"
}

for i in $(seq 1 "$pairs"); do
  run off $((2 * i - 1)); run on $((2 * i - 1)); run on $((2 * i)); run off $((2 * i))
done

python3 - "$out" <<'EOF'
import glob, json, re, statistics, sys
out = sys.argv[1]
def runs(side):
    rows = []
    for path in sorted(glob.glob(f"{out}/{side}-*.json")):
        n = re.findall(r"(\d+)\.json$", path)[0]
        report = json.load(open(path))
        server = report.get("server") or {}
        own = ((report.get("gateway") or {}).get("first_audio_ms") or {}).get("p99")
        rows.append({"run": f"{side} {n}", "turns": report["turns_completed"],
                     "errors": report["errors"], "cpu": server.get("cpu_seconds"), "p99": own})
    return rows
fmt = lambda v, s: "–" if v is None else format(v, s)
rows = {"off": runs("off"), "on": runs("on")}
print(f"{'run':<8} {'turns':>6} {'errors':>6} {'CPU s':>7} {'own p99 ms':>10}")
for r in rows["off"] + rows["on"]:
    print(f"{r['run']:<8} {r['turns']:>6} {r['errors']:>6} {fmt(r['cpu'], '.1f'):>7} {fmt(r['p99'], '.2f'):>10}")
print()
for name, key in [("gateway CPU s", "cpu"), ("own first-audio p99 ms", "p99"), ("turns", "turns")]:
    sides = {s: [r[key] for r in rows[s] if r.get(key) is not None] for s in rows}
    if sides["off"] and sides["on"]:
        a, b = statistics.mean(sides["off"]), statistics.mean(sides["on"])
        print(f"{name:<24} off {a:.2f} ({min(sides['off']):.2f}–{max(sides['off']):.2f})  "
              f"on {b:.2f} ({min(sides['on']):.2f}–{max(sides['on']):.2f})  ratio {b / a:.3f}")
EOF
echo "reports in $out" >&2
