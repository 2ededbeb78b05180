#!/usr/bin/env python3
"""Times two arbench builds against each other fairly: size by size, each build runs the
same arguments in turn (which goes first alternates from round to round), so that a machine
that drifts (other jobs, clock frequency, the page cache) treats both alike; each size's time
is the median over the rounds, in-place and out-of-place apart. Prints one row per
collective and size with both medians and the change (the median of the rounds' B/A ratios,
which pairs the two runs of a round), and flags the sizes where B is slower than A by more
than --threshold. Running A against itself shows how much this machine's noise alone moves
the figures.

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
    # arbench's JSON before multi-collective runs had no "collective": all-reduce rows.
    return {(r["backend"], r.get("collective", "allreduce"), r["type"], r["op"],
             r["size_bytes"]): r for r in rows}


def sizes_of(arbench, args, work):
    """The sizes the arguments sweep, from a run of one iteration each."""
    quick = [a for a in args]
    for flag in ("-n", "--iters", "-w", "--warmup_iters"):
        while flag in quick:
            i = quick.index(flag)
            del quick[i:i + 2]
    rows = sweep(arbench, [*quick, "-n", "1", "-w", "0", "-c", "0"], os.path.join(work, "sizes.json"))
    return sorted({key[4] for key in rows})


def without_range(args):
    """The arguments less the size range (-b, -e, -f, -i), which each round sets per size."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-b", "--minbytes", "-e", "--maxbytes", "-f", "--stepfactor", "-i",
                   "--stepbytes"):
            skip = True
        else:
            out.append(a)
    return out


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
        sizes = sizes_of(options.a, args, work)
        base = without_range(args)
        for run in range(options.runs):
            for size in sizes:
                for side in ("a", "b") if run % 2 == 0 else ("b", "a"):
                    rows = sweep(getattr(options, side), [*base, "-b", str(size), "-e", str(size)],
                                 os.path.join(work, f"{side}.json"))
                    for key, row in rows.items():
                        for group in ("out_of_place", "in_place"):
                            times[side].setdefault(key, {}).setdefault(group, []).append(
                                row[group]["time_us"])
    print(f"# {options.runs} rounds, each size by A and B in turn; median time (us) per size; "
          f"A = {options.a}, B = {options.b}")
    print(f"# {'collective':>14} {'size (B)':>12} {'type':>5} {'op':>4}"
          f"  {'A oop':>10} {'B oop':>10} {'change':>8}"
          f"  {'A ip':>10} {'B ip':>10} {'change':>8}")
    slower = []
    for key in sorted(times["a"]):
        if key not in times["b"]:
            continue
        line = f"  {key[1]:>14} {key[4]:>12} {key[2]:>5} {key[3]:>4}"
        for group in ("out_of_place", "in_place"):
            a_times, b_times = times["a"][key][group], times["b"][key][group]
            a, b = statistics.median(a_times), statistics.median(b_times)
            ratios = [y / x for x, y in zip(a_times, b_times) if x > 0]
            change = (statistics.median(ratios) - 1) * 100 if ratios else 0.0
            line += f"  {a:>10.2f} {b:>10.2f} {change:>+7.1f}%"
            if change > options.threshold:
                slower.append(f"{key[1]} {key[4]} B {group}")
        print(line)
    if slower:
        print(f"# slower than A by more than {options.threshold}%: " + ", ".join(slower))
        return 1
    print(f"# no size slower than A by more than {options.threshold}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
