"""The table of README.md, from the four raw files beside this script:

    python experiments/bench/t5_onehot_cpu/summary.py

Per file and encoding: the median step over every timed step (3 visits x 3 steps), its
ratio to `none` measured in the same process, and CPU seconds per step.
"""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = (("before.json", "gather (1801941)"), ("after.json", "one-hot everywhere (288456f)"),
         ("before_rerun.json", "gather (1801941), again"),
         ("platform.json", "by platform: gather on the CPU"))

print("| file | T5 construction | encoding | step ms | ratio to none | CPU s/step |")
print("|---|---|---|---|---|---|")
for name, what in FILES:
    rows = json.loads((HERE / name).read_text())["speed"]["rows"]
    for row in rows:
        if row["encoding"] == "none":
            continue
        step = statistics.median(row["step_s_all"])
        print(f"| {name} | {what} | {row['encoding']} | {1e3 * step:.0f} | "
              f"{row['ratio_to_none']:.2f} | {row['cpu_s']:.2f} |")
