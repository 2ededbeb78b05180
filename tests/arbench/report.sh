#!/usr/bin/env bash
# arbench plot and report: two real sweeps, a simulated replay sweep and a replayed
# communication trace. The plot is well-formed SVG with a line per file (and a PNG when
# rsvg-convert is there); the report is one HTML file that fetches nothing, and headless
# Chromium renders it without a console message, its screenshot showing the charts' colours.
# Skipped (77) without Chromium (scripts/install-deps.sh installs it), after the checks that
# need no browser.
#
# Usage: bash report.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: report.sh path/to/arbench}
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

for name in first second; do
  "$arbench" --np 2 -b 1K -e 1M -f 8 -n 3 -w 1 --repeat 3 --json "$work/$name.json" \
    >"$work/run.txt" 2>&1 || fail "sweep: $(cat "$work/run.txt")"
done
"$arbench" replay --simulate --topology "$source_dir/examples/topologies/p40-256x4-100g-ib.json" \
  --model alexnet --profile p40 --sweep --policy buckets,sync-after-backward --algo ring \
  --json "$work/replay.json" >"$work/run.txt" 2>&1 || fail "replay: $(cat "$work/run.txt")"
"$arbench" replay --np 4 --comms-trace "$source_dir/examples/comms-traces/ddp-4ranks" \
  --back-to-back --json "$work/trace.json" >"$work/run.txt" 2>&1 || fail "trace: $(cat "$work/run.txt")"

"$arbench" plot "$work/first.json" "$work/second.json" -o "$work/plot.svg" >"$work/run.txt" 2>&1 ||
  fail "plot: $(cat "$work/run.txt")"
"$python" - "$work/plot.svg" <<'PY' || fail "plot.svg: $(head -c 3000 "$work/plot.svg")"
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
charts = root.findall(ns + "svg")
assert len(charts) == 2, len(charts)
for chart in charts:
    lines = chart.findall(ns + "polyline")
    assert len(lines) == 2, len(lines)  # one per file
    for line in lines:
        assert len(line.get("points").split()) == 4, line.get("points")  # 1K, 8K, 64K, 512K
    texts = " ".join(t.text or "" for t in chart.iter(ns + "text"))
    for label in ("message size", "first: arcoll", "second: arcoll", "1 KiB", "512 KiB"):
        assert label in texts, (label, texts)
titles = [c.find(ns + "text").text for c in charts]
assert titles == ["Bus bandwidth", "Time per all-reduce"], titles
PY
if command -v rsvg-convert >/dev/null; then
  "$arbench" plot "$work/first.json" -o "$work/plot.png" >/dev/null 2>&1 || fail "plot -o png"
  [[ $(head -c 8 "$work/plot.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
    fail "plot.png is not a PNG"
fi
expect_usage_error_of "must end in .svg or .png" "$arbench" plot "$work/first.json" -o "$work/plot.gif"
expect_usage_error_of "plot draws sweeps" "$arbench" plot "$work/replay.json" -o "$work/p.svg"
expect_usage_error_of "cannot be read" "$arbench" plot "$work/none.json" -o "$work/p.svg"

"$arbench" report "$work/second.json" "$work/replay.json" "$work/trace.json" \
  --baseline "$work/first.json" --threshold 99 -o "$work/report.html" >"$work/run.txt" 2>&1 ||
  fail "report: $(cat "$work/run.txt")"
"$python" - "$work/report.html" <<'PY' || fail "report.html"
import re, sys
page = open(sys.argv[1]).read()
# Self-contained: nothing to fetch, no script.
assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', page), "fetches something"
assert "<script" not in page
# The comparison's verdict, whichever it is: sweeps of 3 iterations on a host that runs other
# tests too can differ a hundredfold at a row (timing is for the benchmarks, not this test).
assert re.search(r"(PASSED: none|FAILED: \d+) of \d+ row\(s\) regressed beyond 99\.0%", page)
for text in ("Bus bandwidth", "Time per all-reduce", "against the baseline",
             "Replay:", "Iteration time: compute and exposed communication",
             "Communication trace:", "Time per collective", "cpu_model", "command_line"):
    assert text in page, text
assert page.count("<svg") >= 4, page.count("<svg")
PY

chromium=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $chromium ]]; then
  echo "SKIPPED: no Chromium to render the report (scripts/install-deps.sh installs it)"
  exit 77
fi
# Chromium logs every console message of the page as ":CONSOLE"; the page has none.
timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --user-data-dir="$work/chromium" --enable-logging=stderr --v=0 --window-size=1200,3000 \
  --screenshot="$work/report.png" "file://$work/report.html" >"$work/chromium.txt" 2>&1 ||
  fail "chromium: $(tail -20 "$work/chromium.txt")"
if grep -q ":CONSOLE" "$work/chromium.txt"; then
  fail "console messages: $(grep ":CONSOLE" "$work/chromium.txt")"
fi
"$python" - "$work/report.png" <<'PY' || fail "the screenshot does not show the charts"
import sys
from PIL import Image
image = Image.open(sys.argv[1]).convert("RGB")
counts = {}
for colour in image.getdata():
    counts[colour] = counts.get(colour, 0) + 1
# The first two series' colours (the lines of the two sweeps, the replay's bars).
for rgb in ((0x1f, 0x77, 0xb4), (0xd6, 0x27, 0x28)):
    assert counts.get(rgb, 0) > 500, (rgb, counts.get(rgb, 0))
PY
echo "report: ok"
