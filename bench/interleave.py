#!/usr/bin/env python3
"""Times two arbench builds against each other fairly: their sweeps run alternately (A, B, A,
B, ...) with the same arguments, so that a machine that drifts (another job, frequency, the
page cache) treats both alike; each size's time is the median over the runs, in-place and
out-of-place apart. Prints one row per size with both medians and the change, and flags the
sizes where B is slower than A by more than --threshold.

    bench/interleave.py --runs 3 base/build/bench/arbench build/bench/arbench \\
        -- --np 2 -b 8 -e 128M -f 4 -n 200

Exit code 1 when a size is slower beyond the threshold, 0 otherwise.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def sweep(arbench, args, path):
    subprocess.run([arbench, *args, "--json", path], check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        rows = json.load(f)["rows"]
    return {(r["backend"], r["type"], r["op"], r["size_bytes"]): r for r in rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="arbench of the baseline (A)")
    parser.add_argument("b", help="arbench to compare with it (B)")
    parser.add_argument("--runs", type=int, default=3, help="sweeps of each, alternating")
    parser.add_argument("--threshold", type=float, default=5.0, help="percent slower that counts")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then arbench's arguments")
    options = parser.parse_args()
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    times = {"a": {}, "b": {}}  # side -> row key -> group -> [us]
    with tempfile.TemporaryDirectory() as work:
        for run in range(options.runs):
            for side in ("a", "b"):
                rows = sweep(getattr(options, side), args, os.path.join(work, f"{side}{run}.json"))
                for key, row in rows.items():
                    for group in ("out_of_place", "in_place"):
                        times[side].setdefault(key, {}).setdefault(group, []).append(
                            row[group]["time_us"])
    print(f"# {options.runs} interleaved runs each; median time (us) per size; "
          f"A = {options.a}, B = {options.b}")
    print(f"# {'size (B)':>12} {'type':>5} {'op':>4}  {'A oop':>10} {'B oop':>10} {'change':>8}"
          f"  {'A ip':>10} {'B ip':>10} {'change':>8}")
    slower = []
    for key in sorted(times["a"], key=lambda k: (k[0], k[1], k[2], k[3])):
        if key not in times["b"]:
            continue
        line = f"  {key[3]:>12} {key[1]:>5} {key[2]:>4}"
        for group in ("out_of_place", "in_place"):
            a = statistics.median(times["a"][key][group])
            b = statistics.median(times["b"][key][group])
            change = (b - a) / a * 100 if a > 0 else 0.0
            line += f"  {a:>10.2f} {b:>10.2f} {change:>+7.1f}%"
            if change > options.threshold:
                slower.append(f"{key[3]} B {group}")
        print(line)
    if slower:
        print(f"# slower than A by more than {options.threshold}%: " + ", ".join(slower))
        return 1
    print(f"# no size slower than A by more than {options.threshold}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
