"""Prints the peer benchmark's table from `livegate loadtest` JSON reports.

  compare.py ADK.json LIVEGATE.json          the side-by-side table with ratios
  compare.py --holds LIMIT REPORT.json       exit 0 if the run had no errors and p99 <= LIMIT ms
  compare.py --capacity LIMIT DIR N...       the largest N each gateway held (DIR/{adk,livegate}-N.json)
"""

import json
import sys
from pathlib import Path


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
        "gateway cores (all connected)": server.get("cpu_cores_at_peak") or server.get("cpu_cores"),
        "gateway peak RSS MiB": server.get("peak_rss_kib", 0) / 1024,
        "gateway CPU µs per client frame": cpu / frames * 1e6 if frames else float("nan"),
    }


def fmt(value):
    if isinstance(value, tuple):
        return " / ".join(fmt(v) for v in value)
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def table(adk, livegate):
    a, l = row(adk), row(livegate)
    print(f"{adk['sessions']} sessions, measured by {livegate.get('generator', '?')}")
    print()
    print("| | ADK Python | livegate | ADK / livegate |")
    print("|---|---|---|---|")
    for key in a:
        ratio = ""
        x, y = a[key], l[key]
        if isinstance(x, tuple):
            x, y = x[1], y[1]
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y and key != "errors" \
                and key != "turns completed":
            ratio = f"{x / y:.1f}x"
        print(f"| {key} | {fmt(a[key])} | {fmt(l[key])} | {ratio} |")
    done = "turns completed"
    if (a[done], a["errors"]) != (l[done], l["errors"]):
        # A gateway that failed turns did less work in its CPU seconds: only the per-frame
        # cost compares like with like.
        print()
        print(f"not the same work ({a[done]} vs {l[done]} turns, {a['errors']} vs "
              f"{l['errors']} errors): compare CPU per client frame, not CPU seconds")


def capacity(limit, folder, counts):
    best = {}
    for gateway in ("adk", "livegate"):
        for n in counts:
            path = Path(folder) / f"{gateway}-{n}.json"
            if path.exists() and holds(load(path), limit):
                best[gateway] = n
    adk, livegate = best.get("adk"), best.get("livegate")
    print(f"largest session count with first-chunk p99 <= {limit} ms and no errors:")
    print(f"  ADK Python: {adk or 'none of ' + ' '.join(map(str, counts))}")
    print(f"  livegate:   {livegate or 'none of ' + ' '.join(map(str, counts))}")
    if adk and livegate:
        print(f"  ratio: {livegate / adk:.1f}x (at least, if livegate held the largest count tried)")


def main(args):
    if args[:1] == ["--holds"]:
        return 0 if holds(load(args[2]), float(args[1])) else 1
    if args[:1] == ["--capacity"]:
        capacity(float(args[1]), args[2], [int(n) for n in args[3:]])
        return 0
    table(load(args[0]), load(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
