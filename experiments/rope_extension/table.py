"""Markdown table of the rope_extension results: loss, perplexity and next-token accuracy at
the training length and at 8x, one row per method."""

import json
import sys
from pathlib import Path

rows = []
for path in sorted(Path(sys.argv[1]).glob("*.json")):
    result = json.loads(path.read_text())
    by_length = {r["length"]: r for r in result["lengths"]}
    rows.append((result["method"], by_length))
lengths = sorted({n for _, by in rows for n in by})
print("| method | " + " | ".join(f"acc@{n} | ppl@{n}" for n in lengths) + " |")
print("|---|" + "---|---|" * len(lengths))
for method, by in sorted(rows, key=lambda r: -r[1][lengths[-1]].get("acc", 0)):
    cells = []
    for n in lengths:
        r = by.get(n, {})
        cells += [f"{100 * r['acc']:.2f}%" if "acc" in r else "-",
                  f"{r['ppl']:.3f}" if "ppl" in r else r.get("error", "-")]
    print(f"| {method} | " + " | ".join(cells) + " |")
