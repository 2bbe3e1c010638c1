#!/usr/bin/env bash
# The peer benchmark: ADK Python's live gateway (its bidi-demo handler, adk_gateway.py), Pipecat's
# Twilio bot (pipecat_gateway.py), livegate's `gemini` backend and the floor (benches/peer/floor,
# a bare relay), each in front of the same `livegate mock-gemini` over wss://, driven by the same
# `livegate loadtest` (sessions, turns, clips, ramp), one after the other in one invocation so
# that the ratios are measured on the same machine in the same minutes.
#
#   benches/peer/run.sh                          # 100 sessions x 3 spoken turns each
#   benches/peer/run.sh --sessions 50 --turns 2
#   benches/peer/run.sh --capacity "25 50 100 200 400 800 1000"
#                                                # the table, then the largest count each holds
#                                                # at first-chunk p99 <= 30 ms
#
# The load speaks each gateway's own protocol: livegate's WebSocket protocol to ADK (whose demo
# takes the same binary PCM frames), the floor and livegate; Twilio Media Streams (`--protocol
# twilio`, a simulated phone: μ-law 8 kHz frames in JSON) to Pipecat's Twilio serializer and to
# livegate's telephony bridge. livegate runs once on each, so every peer is compared with a
# livegate run that did the same work. No gateway records audio or keeps sessions on disk (ADK's
# demo and Pipecat's example do neither).
# Reports (JSON) go to --out (default target/peer); the table is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

sessions=100 turns=3 capacity="" out=target/peer ramp=50 p99_limit=30
while [ $# -gt 0 ]; do
  case "$1" in
    --sessions) sessions=$2; shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    --capacity) capacity=$2; shift 2 ;;
    --ramp) ramp=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
cert=$root/tests/fixtures/tls/cert.pem
key=$root/tests/fixtures/tls/key.pem
model=gemini-2.5-flash-native-audio-preview-12-2025

echo "== building livegate and the floor (release), and the Python peers' venv" >&2
# LIVEGATE_BIN and PEER_VENV reuse a binary and a venv already at hand (with livegate-loadtest and
# livegate-mock-gemini beside that binary or on PATH: `cargo build --release` builds all three).
bin=${LIVEGATE_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --quiet --workspace
  bin=$root/target/release/livegate
fi
floor=${FLOOR_BIN:-$(dirname "$bin")/livegate-floor}
venv=${PEER_VENV:-$root/target/peer-venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r benches/peer/requirements.txt

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits (at most 30 s) until something accepts connections on the port.
wait_port() {
  for _ in $(seq 1 150); do
    python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$1" \
      2>/dev/null && return 0
    sleep 0.2
  done
  echo "nothing listens on port $1" >&2; return 1
}

mock_port=$(free_port)
RUST_LOG=warn "$bin" mock-gemini --port "$mock_port" --api-key test-key \
  --tls-cert "$cert" --tls-key "$key" \
  --sim-pacing burst --sim-reply-delay-ms 0 --sim-chunk-ms 200 >"$out/mock.log" 2>&1 &
pids+=($!)

# start_gateway NAME PORT: starts it in the background; its pid in $gateway_pid.
start_gateway() {
  case "$1" in
    adk|pipecat)
      (cd benches/peer && PEER_UPSTREAM="https://127.0.0.1:$mock_port" GOOGLE_API_KEY=test-key \
        SSL_CERT_FILE="$cert" exec "$venv/bin/python" -m uvicorn "$1_gateway:app" \
        --host 127.0.0.1 --port "$2" --log-level warning) >"$out/$1.log" 2>&1 &
      ;;
    livegate|livegate-twilio)
      SSL_CERT_FILE="$cert" GEMINI_API_KEY=test-key RUST_LOG=warn "$bin" --bind "127.0.0.1:$2" \
        --model "$model" --gemini-base-url "wss://127.0.0.1:$mock_port" \
        --session-store memory: --artifact-store memory: --save-audio false >"$out/$1.log" 2>&1 &
      ;;
    floor)
      SSL_CERT_FILE="$cert" "$floor" "127.0.0.1:$2" \
        "wss://127.0.0.1:$mock_port/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=test-key" \
        "$model" >"$out/floor.log" 2>&1 &
      ;;
  esac
  gateway_pid=$!
  wait_port "$2"
}

# run NAME SESSIONS: one load test against a fresh gateway; the report in $out/NAME-SESSIONS.json.
run() {
  local port protocol=ws; port=$(free_port)
  case "$1" in pipecat|livegate-twilio) protocol=twilio ;; esac
  start_gateway "$1" "$port"
  echo "== $1, $2 sessions x $turns turns ($protocol protocol)" >&2
  # The model's own delay: the mock's sim ends an utterance after 500 ms of silence and replies at
  # once; none of the gateways on the gemini path can say so itself.
  "$bin" loadtest --url "ws://127.0.0.1:$port/ws" --protocol "$protocol" --sessions "$2" \
    --turns "$turns" --duration 600s --ramp "$ramp" --server-pid "$gateway_pid" --quiet \
    --model-delay-ms 500 --report "$out/$1-$2.json" >"$out/$1-$2.txt" 2>&1 || true
  kill "$gateway_pid" 2>/dev/null || true
  wait "$gateway_pid" 2>/dev/null || true
}

gateways="adk pipecat livegate livegate-twilio floor"
for gateway in $gateways; do
  run "$gateway" "$sessions"
done
if [ -n "$capacity" ]; then
  for gateway in $gateways; do
    for n in $capacity; do
      [ "$n" = "$sessions" ] || run "$gateway" "$n"
      python3 benches/peer/compare.py --holds "$p99_limit" "$out/$gateway-$n.json" || break
    done
  done
  python3 benches/peer/compare.py "$out" "$sessions" "$p99_limit" $capacity
else
  python3 benches/peer/compare.py "$out" "$sessions"
fi
