#!/usr/bin/env python3
"""Turns bench_mutex's JSON output into one SVG (stdlib only: no matplotlib needed).

Usage: bench_plot.py bench.json [more.json ...] bench.svg   (e.g. bench_mutex's and bench_cost's)

One panel per metric; one horizontal bar per benchmark that reports it; a dashed line marks
the target where the issue set one (higher or lower is better, as the panel title says).
"""
import json
import sys
from html import escape

PANELS = [
    # counter, title, target
    ("speed_vs_raw", "speed vs raw hiredis baseline (higher is better, target >= 0.95)", 0.95),
    ("gap_vs_rtt", "hand-off gap p50 / PING sampled during the run (lower is better, target <= 2)", 2.0),
    ("gap_vs_rtt_after_hold", "hand-off gap p50 / PING sent right after the same hold (target <= 2)", 2.0),
    ("gap_vs_raw_handoff", "hand-off gap p50 / a notified lock on raw hiredis, same hold (lower is better)", 1.0),
    ("acq_vs_raw", "contended acquisitions/s, every lock kind, vs a notified lock on raw hiredis (higher is better)", 1.0),
    ("cmds_per_acq", "server commands per acquisition (lower is better, target <= 6)", 6.0),
    ("tput_vs_hold", "throughput x hold time (1.0 = lock never idle; fair target >= 0.88)", 0.88),
    ("share_min", "smallest contender share / fair share (1.0 = fair; fair target >= 0.8)", 0.8),
    ("wait_p99_vs_hold", "p99 wait / hold time (lower is better, default-mode target <= 10)", 10.0),
    ("aggregate_vs_raw", "aggregate cycles/s vs raw, 8 workers x 8 names (higher is better, target >= 0.95)", 0.95),
    ("client_cpu_vs_raw", "client CPU per cycle vs raw (lower is better, target <= 1.1)", 1.1),
    ("server_cpu_vs_raw_cycle", "server CPU per operation / raw uncontended cycle's (contended target <= 2)", 2.0),
    ("server_cpu_vs_paced_raw_cycle", "server CPU per acquisition / raw cycle's at the same pace (lower is better)", 2.0),
    ("floor_server_cpu_vs_raw_cycle", "the floor (a raw queued hand-off without the checks): server CPU / raw cycle", 2.0),
    ("server_cpu_vs_floor", "server CPU per contended acquisition / the floor's, same run (1.0 = the floor)", 1.0),
]

WIDTH, LABEL_W, BAR_H, GAP, TITLE_H = 900, 380, 16, 4, 28


def short(name):
    return name.replace("BM_", "").replace("/iterations:1", "").replace("/manual_time", "")


def main(srcs, dst):
    runs = []
    for src in srcs:
        with open(src) as f:
            runs += [b for b in json.load(f)["benchmarks"] if b.get("run_type", "iteration") == "iteration"]
    parts, y = [], 10
    for key, title, target in PANELS:
        rows = [(short(b["name"]), float(b[key])) for b in runs if key in b]
        if not rows:
            continue
        top = max([v for _, v in rows] + [target]) * 1.1 or 1.0
        scale = (WIDTH - LABEL_W - 70) / top
        parts.append(f'<text x="10" y="{y + 18}" font-weight="bold">{escape(title)}</text>')
        y += TITLE_H
        y0 = y
        for label, value in rows:
            w = max(1.0, value * scale)
            parts.append(f'<text x="{LABEL_W - 6}" y="{y + BAR_H - 4}" text-anchor="end">{escape(label)}</text>')
            parts.append(f'<rect x="{LABEL_W}" y="{y}" width="{w:.1f}" height="{BAR_H}" fill="#4878a8"/>')
            parts.append(f'<text x="{LABEL_W + w + 4:.1f}" y="{y + BAR_H - 4}">{value:.3g}</text>')
            y += BAR_H + GAP
        tx = LABEL_W + target * scale
        parts.append(f'<line x1="{tx:.1f}" y1="{y0 - 2}" x2="{tx:.1f}" y2="{y}" stroke="#c03030" stroke-dasharray="4 3"/>')
        y += 14
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{y + 10}" '
           f'font-family="sans-serif" font-size="12">\n<rect width="100%" height="100%" fill="white"/>\n'
           + "\n".join(parts) + "\n</svg>\n")
    with open(dst, "w") as f:
        f.write(svg)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1:-1], sys.argv[-1])
