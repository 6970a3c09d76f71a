"""How the floor of steps per stage reshapes the schedule: the share of the pretraining's
tokens spent in its longest stages, here (a run of schedule=roformer, its stages.json) and in
RoFormer's Table 4 (Su et al. 2021, as /work/shared/REFERENCES.md gives it).

    long_share            tokens in the stages at the longest length / all tokens, here
    long_share:published  the same of Table 4 (its 1536-token stages 2 and 5)
"""

import json
from pathlib import Path

from posjax.train.trainer import longest_share

# RoFormer's Table 4: (maxlen, batch, steps) per stage.
TABLE_4 = ((512, 256, 200_000), (1536, 256, 12_500), (256, 256, 120_000), (128, 512, 80_000),
           (1536, 256, 10_000), (512, 512, 30_000))


def values(study: Path) -> dict[str, float]:
    run = next((study / "results").glob("schedule=roformer,*/stages.json"))
    stages = [(s["seq_len"], s["batch_size"], s["steps"])
              for s in json.loads(run.read_text())["stages"]]
    return {"long_share": longest_share(stages), "long_share:published": longest_share(TABLE_4)}
