#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every figure in README.md comes from a committed result file.

A figure is a number (or a range of numbers) with a unit: KiB, MiB, GiB,
TiB, kB, MB, GB, TB, ns, us, µs, ms, s, %, x or ×. FIGURES below lists each
one the README may hold, the file it comes from and how to read it there.
The test fails when
  - the README holds a figure that FIGURES does not list (add a row, and
    the result file it comes from, or leave the figure out);
  - a listed figure is not in the README any more (remove its row);
  - a listed figure is not what its file says (the file changed, or the
    README did).
Usage: check_readme_figures.py [SOURCE_DIR [README]]
"""
import json
import os
import re
import sys

MIB = 1 << 20
UNITS = r"(?:KiB|MiB|GiB|TiB|kB|MB|GB|TB|ns|us|µs|ms|s|%|x|×)"
NUMBER = r"\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(r"(?<![\w.,-])(" + NUMBER + r"(?:\s*[-–]\s*" + NUMBER +
                    r")?)[ \u00a0]?(" + UNITS + r")(?![\w])")

SEED = "docs/seed-replay.jsonl"
SLEEP = "tests/gpu/results/h200-2026-12-02c-sleep_bench.log"
START = "tests/gpu/results/h200-2026-12-04g-start_bench.log"
START_QUIET = "tests/gpu/results/h200-2026-12-04h-start_bench.log"
SEED_CONFIG = "tests/scenarios/seed-pp32-16.json"


def mib(n):
    return f"{n // MIB:,} MiB"


def times(n):
    return f"{n:.2f}×"


def seed(step, stage, key, fmt=mib):
    """A field of one stage of one step of the seed's replay."""
    def read(path):
        for line in open(path, encoding="utf-8"):
            s = json.loads(line)
            if s["step"] == step:
                for st in s["stages"]:
                    if st["stage"] == stage:
                        return fmt(st[key])
        raise KeyError(f"step {step} stage {stage}")
    return read


def bench(name, key, fmt=times, pattern=None, where=None):
    """A JSON line of a result log, picked by its "bench" name (and the
    fields in where): a number (formatted by fmt) or, with pattern, a match
    in a text field."""
    def read(path):
        for line in open(path, encoding="utf-8"):
            line = line.strip()
            if not line.startswith("{"):
                continue
            obj = json.loads(line)
            if obj.get("bench") != name:
                continue
            if where and any(obj.get(k) != v for k, v in where.items()):
                continue
            if pattern:
                m = re.search(pattern, obj[key])
                if not m:
                    raise KeyError(f"{pattern!r} not in {name}.{key}")
                return m.group(1)
            return fmt(obj[key])
        raise KeyError(f"no line with bench {name!r}")
    return read


def ratio(top, bottom, fmt=times):
    """top / bottom, each (bench name, key) of the same result log."""
    def read(path):
        ident = lambda x: x
        return fmt(bench(*top, fmt=ident)(path) / bench(*bottom, fmt=ident)(path))
    return read


def config_size(path_in_json):
    """A size string of a JSON file ("2MiB"), written as the README does."""
    def read(path):
        obj = json.load(open(path, encoding="utf-8"))
        for k in path_in_json:
            obj = obj[k]
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(\w+)", obj)
        return f"{m.group(1)} {m.group(2)}"
    return read


# figure as the README writes it -> (file, how to read it there)
FIGURES = {
    "2,112 MiB": (SEED, seed(3, 0, "kv_mapped_bytes")),
    "1,320 MiB": (SEED, seed(3, 1, "kv_mapped_bytes")),
    "160 MiB": (SEED, seed(4, 0, "kv_mapped_bytes")),
    "100 MiB": (SEED, seed(4, 1, "kv_mapped_bytes")),
    "2 MiB": (SEED_CONFIG, config_size(["devices", 0, "chunk"])),
    "32 MiB": (SLEEP, bench("sleep_wake_32mib_chunks", "what",
                            pattern=r"(\d+ MiB) chunks")),
    "16 GiB": (SLEEP, bench("sleep_wake_32mib_chunks", "what",
                            pattern=r"(\d+ GiB) stage")),
    "1.12×": (SLEEP, bench("sleep_wake_32mib_chunks", "sleep_ratio")),
    "1.17×": (SLEEP, bench("sleep_wake_32mib_chunks", "wake_ratio")),
    "8 GiB": (START, bench("engine_start", "what",
                           pattern=r"(\d+ GiB) of weights")),
    "4 GiB": (START, bench("engine_start", "what",
                           pattern=r"(\d+ GiB) of KV")),
    "1.01×": (START, bench("engine_start", "ratio")),
    # The quieter run: the default's start (the 2 and 4 GiB ones measured
    # the same, 1.003 and 1.006).
    "1.00×": (START_QUIET, bench("engine_start", "ratio")),
    "2 GiB": (START, bench("engine_start_standby", "standby", where={"standby": "2GiB"},
                           fmt=lambda s: s.replace("GiB", " GiB"))),
    "1.02×": (START, bench("engine_start_standby", "ratio", where={"standby": "4GiB"})),
    "1.18×": (START, bench("engine_start_standby", "ratio", where={"standby": "2GiB"})),
}


def norm(fig):
    fig = fig.replace("\u00a0", " ").replace("–", "-")
    return re.sub(r"(\d)\s*x$", r"\1×", fig)


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "."
    readme = sys.argv[2] if len(sys.argv) > 2 else os.path.join(src, "README.md")
    text = open(readme, encoding="utf-8").read()
    found = {}
    for n, line in enumerate(text.split("\n"), 1):
        for m in FIGURE.finditer(line):
            fig = norm(m.group(1) + (" " if m.group(2) not in "%x×" else "") + m.group(2))
            found.setdefault(fig, n)
    bad = []
    for fig, n in sorted(found.items(), key=lambda kv: kv[1]):
        if fig not in FIGURES:
            bad.append(f"README.md:{n}: {fig!r} is not in check_readme_figures.py's "
                       "table: add it with the result file it comes from")
    for fig, (path, read) in FIGURES.items():
        if fig not in found:
            bad.append(f"{fig!r} is in the table but not in README.md: remove its row")
            continue
        try:
            value = norm(read(os.path.join(src, path)))
        except (OSError, KeyError, ValueError) as e:
            bad.append(f"README.md:{found[fig]}: {fig!r}: cannot read {path}: {e}")
            continue
        if value != fig:
            bad.append(f"README.md:{found[fig]}: {fig!r}, but {path} says {value!r}")
    for b in bad:
        print("check_readme_figures: " + b)
    print(f"check_readme_figures: {len(found)} figures in README.md, "
          f"{len(FIGURES)} in the table, {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
