"""Prints the peer benchmark's table from `livegate loadtest` JSON reports.

  compare.py DIR N                       the table of DIR/{gateway}-N.json, with the ratios
  compare.py --holds LIMIT REPORT.json   exit 0 if the run had no errors and p99 <= LIMIT ms
  compare.py --capacity LIMIT DIR N...   the largest N each gateway held (DIR/{gateway}-N.json)

The gateways, as benches/peer/run.sh names them: each peer beside the livegate run that speaks
the same protocol to the same load, and the floor beside livegate on livegate's protocol.
"""

import json
import sys
from pathlib import Path

# name in the reports' file names, column title, protocol the load speaks to it
GATEWAYS = [
    ("adk", "ADK Python", "WebSocket"),
    ("pipecat", "Pipecat", "Twilio"),
    ("livegate", "livegate", "WebSocket"),
    ("livegate-twilio", "livegate", "Twilio"),
    ("floor", "floor", "WebSocket"),
]
# (numerator, denominator): what each ratio compares, like with like.
RATIOS = [
    ("adk", "livegate"),
    ("pipecat", "livegate-twilio"),
    ("livegate", "floor"),
]


def load(path):
    with open(path) as f:
        return json.load(f)


def holds(report, limit):
    latency = report["gateway_latency_ms"]
    return (
        report["errors"] == 0
        and report["unexpected_closes"] == 0
        and latency["count"] > 0
        and latency["p99"] <= limit
    )


def row(report):
    server = report.get("server") or {}
    latency = report["gateway_latency_ms"]
    frames = report["sent"]["frames"]
    cpu = server.get("cpu_seconds", float("nan"))
    return {
        "first answer chunk p50 / p99 ms (client)": (latency["p50"], latency["p99"]),
        "turns completed": report["turns_completed"],
        "errors": report["errors"] + report["unexpected_closes"],
        "gateway CPU seconds": cpu,
        "gateway CPU µs per client frame": cpu / frames * 1e6 if frames else float("nan"),
        "gateway cores (all connected)": server.get("cpu_cores_at_peak") or server.get("cpu_cores"),
        "gateway peak RSS MiB": server.get("peak_rss_kib", 0) / 1024,
    }


def fmt(value):
    if isinstance(value, tuple):
        return " / ".join(fmt(v) for v in value)
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    if value is None:
        return "–"
    return str(value)


def capacities(limit, folder, counts):
    """The largest count each gateway held, from the capacity runs in the folder."""
    best = {}
    for name, _, _ in GATEWAYS:
        tried = [n for n in counts if (Path(folder) / f"{name}-{n}.json").exists()]
        held = [n for n in tried if holds(load(Path(folder) / f"{name}-{n}.json"), limit)]
        if tried:
            best[name] = max(held) if held else None
    return best


def table(folder, sessions, capacity=None):
    rows = {}
    for name, _, _ in GATEWAYS:
        path = Path(folder) / f"{name}-{sessions}.json"
        if path.exists():
            rows[name] = row(load(path))
    if not rows:
        print(f"no reports for {sessions} sessions in {folder}")
        return
    names = [g for g in GATEWAYS if g[0] in rows]
    some = load(Path(folder) / f"{names[0][0]}-{sessions}.json")
    print(f"{sessions} sessions, measured by {some.get('generator', '?')}")
    print()
    print("| | " + " | ".join(f"{title} ({protocol})" for _, title, protocol in names) + " |")
    print("|---|" + "---|" * len(names))
    for key in rows[names[0][0]]:
        print(f"| {key} | " + " | ".join(fmt(rows[n][key]) for n, _, _ in names) + " |")
    if capacity:
        limit, counts = capacity
        best = capacities(limit, folder, counts)
        cells = [fmt(best.get(n)) if n in best else "not run" for n, _, _ in names]
        print(f"| sessions held at first-chunk p99 <= {limit:g} ms, no errors | " + " | ".join(cells) + " |")
    print()
    for top, bottom in RATIOS:
        if top not in rows or bottom not in rows:
            continue
        a, b = rows[top], rows[bottom]
        parts = []
        for key, label in [
            ("gateway CPU seconds", "CPU s"),
            ("gateway CPU µs per client frame", "CPU per frame"),
            ("first answer chunk p50 / p99 ms (client)", "first-chunk p99"),
            ("gateway peak RSS MiB", "peak RSS"),
        ]:
            x, y = a[key], b[key]
            if isinstance(x, tuple):
                x, y = x[1], y[1]
            if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y:
                parts.append(f"{label} {x / y:.2f}x")
        print(f"{top} / {bottom}: " + ", ".join(parts))
        if (a["turns completed"], a["errors"]) != (b["turns completed"], b["errors"]):
            # A gateway that failed turns did less work in its CPU seconds: only the per-frame
            # cost compares like with like.
            print(f"  not the same work ({a['turns completed']} vs {b['turns completed']} turns, "
                  f"{a['errors']} vs {b['errors']} errors): compare CPU per client frame")


def main(args):
    if args[:1] == ["--holds"]:
        return 0 if holds(load(args[2]), float(args[1])) else 1
    if args[:1] == ["--capacity"]:
        limit, folder, counts = float(args[1]), args[2], [int(n) for n in args[3:]]
        print(f"largest session count with first-chunk p99 <= {limit:g} ms and no errors:")
        for name, best in capacities(limit, folder, counts).items():
            print(f"  {name}: {best or 'none of ' + ' '.join(map(str, counts))}")
        return 0
    capacity = None
    if len(args) > 2:
        capacity = (float(args[2]), [int(n) for n in args[3:]])
    table(args[0], int(args[1]), capacity)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
