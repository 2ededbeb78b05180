#!/usr/bin/env python3
"""Parameter servers against all-reduce on the emulated cluster (scripts/cluster.sh, as root):
for each count of dedicated server hosts (0: a server share in every worker), one arbench
sweep of `--algo ps,ring,hierarchical` over the same worker hosts, with the cost model's
prediction beside every measurement. The link costs come from `arbench tune` run first on the
same cluster, so the model knows these links.

    bench/parameter_server_cluster.py --arbench build/bench/arbench --hosts 4 --servers 0,1,2,4

Prints, per size, the measured time of every configuration with the model's error, which one
is fastest, and whether the model picked the same; --json keeps every sweep's rows."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "..", "scripts", "cluster.sh")


def cluster(args, server_hosts, command):
    line = [CLUSTER, "--quiet", "--hosts", str(args.hosts), "--ranks-per-host",
            str(args.ranks_per_host), "--server-hosts", str(server_hosts), "--rate", args.rate,
            "--"] + command
    done = subprocess.run(line, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(line)} exited with {done.returncode}:\n{done.stdout}")
    return done.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arbench", required=True)
    parser.add_argument("--hosts", type=int, default=4, help="worker hosts")
    parser.add_argument("--ranks-per-host", type=int, default=1)
    parser.add_argument("--servers", default="0,1,2,4",
                        help="dedicated server hosts, a list (0: a share in every worker)")
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--sizes", default="-b 1M -e 256M -f 4")
    parser.add_argument("--iters", default="-n 3 -w 1")
    parser.add_argument("--piece", default="4M", help="--ps-piece")
    parser.add_argument("--json", help="write every sweep's rows here")
    args = parser.parse_args()
    servers = [int(k) for k in args.servers.split(",")]

    work = tempfile.mkdtemp(prefix="ps-cluster-")
    tuning = os.path.join(work, "tuning.json")
    print(cluster(args, 0, [args.arbench, "tune", "-o", tuning]).strip())

    rows = {}  # (configuration, size) -> row
    for k in servers:
        out = os.path.join(work, f"servers{k}.json")
        # The all-reduces run once, beside the first configuration, on the same worker hosts.
        algorithms = "ps,ring,hierarchical" if k == servers[0] else "ps"
        command = [args.arbench, "--algo", algorithms, "--ps-servers", str(k), "--ps-piece",
                   args.piece, "--tuning", tuning, "--json", out]
        command += args.sizes.split() + args.iters.split()
        cluster(args, k, command)
        for row in json.load(open(out))["rows"]:
            name = row["backend"].split("/", 1)[1]
            if name == "ps":
                name = f"ps/{k}" if k > 0 else "ps colocated"
            rows[(name, row["size_bytes"])] = row

    names = sorted({n for n, _ in rows}, key=lambda n: (not n.startswith("ps"), n))
    sizes = sorted({s for _, s in rows})
    print(f"# {args.hosts} worker host(s) x {args.ranks_per_host} rank(s) at {args.rate}, "
          f"pieces of {args.piece}; time in ms (model's error), fastest marked *")
    print("#%11s " % "size" + " ".join("%20s" % n for n in names) + "  fastest / model's pick")
    for size in sizes:
        measured, predicted = {}, {}
        for n in names:
            row = rows.get((n, size))
            if row is not None:
                measured[n] = row["out_of_place"]["time_us"] / 1e3
                predicted[n] = row["predicted_us"] / 1e3
        best = min(measured, key=measured.get)
        pick = min(predicted, key=predicted.get)
        cells = []
        for n in names:
            if n not in measured:
                cells.append("%20s" % "-")
                continue
            error = (predicted[n] - measured[n]) / measured[n]
            cells.append("%11.1f (%+4.0f%%)%s" % (measured[n], 100 * error,
                                                  "*" if n == best else " "))
        print("%12d " % size + " ".join(cells) + f"  {best} / {pick}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(row, configuration=n) for (n, _), row in sorted(rows.items())], f,
                      indent=1)


if __name__ == "__main__":
    main()
