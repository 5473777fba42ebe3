#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The seed's transition as a chart: KV memory against expert loans, per
stage (GPU) and step, from vram-replay's JSON lines.

    build/vram-replay --socket S tests/scenarios/seed-pp32-16.json \
        | python3 scripts/seed_chart.py --svg docs/seed-transition.svg \
                                        --json docs/seed-replay.jsonl

--svg writes the chart (SVG written by hand: Python's standard library
only, no dates or ids, so the same replay gives the same bytes). --json
writes the replay's lines again without its timings (step_us), keys
sorted: what the chart shows and what README.md's seed figures are checked
against (tests/docs/check_readme_figures.py). Without input files it reads
standard input; with --from-json it reads a file written by --json.
"""
import argparse
import json
import sys

MIB = 1 << 20
KV_COLOUR = "#3b6ea8"
LOAN_COLOUR = "#e69f00"
FONT = "font-family=\"DejaVu Sans, Verdana, sans-serif\""


def normalise(lines):
    """The replay's steps, timings dropped, in step order."""
    steps = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        step = json.loads(line)
        step.pop("step_us", None)
        for st in step["stages"]:
            st.pop("step_us", None)
        steps.append(step)
    steps.sort(key=lambda s: s["step"])
    if not steps:
        raise SystemExit("seed_chart: no steps in the input")
    return steps


def esc(text):
    return (text.replace("&", "&amp;").replace("<", "&lt;")
            .replace(">", "&gt;"))


def tokens(n):
    return f"{n:,}"


def svg(steps):
    stages = sorted({st["stage"] for s in steps for st in s["stages"]})
    devices = {st["stage"]: st["device"] for s in steps for st in s["stages"]}
    by = {(s["step"], st["stage"]): st for s in steps for st in s["stages"]}
    top = max((st["kv_mapped_bytes"] + st["expert_loaned_bytes"]) // MIB
              for st in by.values())
    grid = 500
    ymax = (top // grid + 1) * grid

    bar_w, gap, panel_pad = 58, 26, 30
    n = len(steps)
    panel_w = panel_pad * 2 + n * bar_w + (n - 1) * gap
    left, right, head, foot = 64, 16, 96, 64
    plot_h = 250
    width = left + len(stages) * panel_w + (len(stages) - 1) * 24 + right
    height = head + plot_h + foot

    def y(mib):
        return head + plot_h - plot_h * mib / ymax

    out = []
    w = out.append
    w('<?xml version="1.0" encoding="UTF-8"?>')
    w(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
      f'height="{height}" viewBox="0 0 {width} {height}" {FONT} '
      f'font-size="12">')
    w('<title>The seed: KV memory against expert loans, per stage and '
      'step</title>')
    w(f'<rect width="{width}" height="{height}" fill="#ffffff"/>')
    w(f'<text x="{left}" y="22" font-size="15" font-weight="bold">'
      'The seed on vramd: KV memory against expert loans</text>')
    w(f'<text x="{left}" y="40" fill="#444444">MiB mapped per stage after '
      'each step (prompt tokens; 1,024 output tokens each)</text>')
    # Legend.
    lx = left
    for colour, label in ((KV_COLOUR, "KV cache"),
                          (LOAN_COLOUR, "lent to experts")):
        w(f'<rect x="{lx}" y="50" width="12" height="12" fill="{colour}"/>')
        w(f'<text x="{lx + 17}" y="60">{label}</text>')
        lx += 130
    # Y axis: gridlines and labels, shared by the panels.
    for v in range(0, ymax + 1, grid):
        yy = round(y(v), 1)
        w(f'<line x1="{left}" y1="{yy}" x2="{width - right}" y2="{yy}" '
          f'stroke="#dddddd"/>')
        w(f'<text x="{left - 6}" y="{yy + 4}" text-anchor="end">{v:,}</text>')
    w(f'<text x="16" y="{head + plot_h / 2}" text-anchor="middle" '
      f'transform="rotate(-90 16 {head + plot_h / 2})">MiB</text>')
    for p, stage in enumerate(stages):
        x0 = left + p * (panel_w + 24)
        w(f'<text x="{x0 + panel_w / 2}" y="{head - 12}" text-anchor="middle" '
          f'font-weight="bold">GPU {devices[stage]} (stage {stage})</text>')
        w(f'<line x1="{x0}" y1="{head + plot_h}" x2="{x0 + panel_w}" '
          f'y2="{head + plot_h}" stroke="#333333"/>')
        for i, s in enumerate(steps):
            st = by[(s["step"], stage)]
            kv = st["kv_mapped_bytes"] // MIB
            loan = st["expert_loaned_bytes"] // MIB
            bx = x0 + panel_pad + i * (bar_w + gap)
            cx = bx + bar_w / 2
            ykv = round(y(kv), 1)
            yl = round(y(kv + loan), 1)
            w(f'<rect x="{bx}" y="{ykv}" width="{bar_w}" '
              f'height="{round(head + plot_h - ykv, 1)}" fill="{KV_COLOUR}"/>')
            if loan:
                w(f'<rect x="{bx}" y="{yl}" width="{bar_w}" '
                  f'height="{round(ykv - yl, 1)}" fill="{LOAN_COLOUR}"/>')
            # Figures: KV inside its bar when there is room, else above it.
            if head + plot_h - ykv >= 18:
                w(f'<text x="{cx}" y="{round(head + plot_h - 6, 1)}" '
                  f'text-anchor="middle" fill="#ffffff">{kv:,}</text>')
            else:
                w(f'<text x="{cx}" y="{round(ykv - 4, 1)}" '
                  f'text-anchor="middle" fill="#1b3d66">{kv:,}</text>')
            if loan and ykv - yl >= 18:
                w(f'<text x="{cx}" y="{round(yl + 15, 1)}" '
                  f'text-anchor="middle">{loan:,}</text>')
            w(f'<text x="{cx}" y="{head + plot_h + 16}" '
              f'text-anchor="middle">{esc(tokens(s["prompt_tokens"]))}</text>')
            w(f'<text x="{cx}" y="{head + plot_h + 30}" '
              f'text-anchor="middle" fill="#666666">step {s["step"]}</text>')
    w(f'<text x="{left}" y="{height - 12}" fill="#444444">Long prompts '
      'recall the loans into KV; a short one lends the rest to experts '
      'again.</text>')
    w('</svg>')
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="*", help="vram-replay output (default: stdin)")
    ap.add_argument("--from-json", help="a file written by --json")
    ap.add_argument("--svg", help="where to write the chart")
    ap.add_argument("--json", help="where to write the steps without timings")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as f:
            lines = f.readlines()
    elif args.inputs:
        lines = []
        for p in args.inputs:
            with open(p, encoding="utf-8") as f:
                lines += f.readlines()
    else:
        lines = sys.stdin.readlines()
    steps = normalise(lines)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            for s in steps:
                f.write(json.dumps(s, sort_keys=True, separators=(",", ":")) + "\n")
    if args.svg:
        with open(args.svg, "w", encoding="utf-8") as f:
            f.write(svg(steps))
    if not args.svg and not args.json:
        sys.stdout.write(svg(steps))


if __name__ == "__main__":
    main()
