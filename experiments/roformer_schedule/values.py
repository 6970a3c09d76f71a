"""How the floor of steps per stage reshapes the schedule: the share of the pretraining's
tokens spent in its longest stages, here (a run of schedule=roformer, its stages.json) and in
RoFormer's Table 4 (Su et al. 2021, as /work/shared/REFERENCES.md gives it).

    long_share            tokens in the stages at the longest length / all tokens, here
    long_share:published  the same of Table 4 (its 1536-token stages 2 and 5)
"""

import json
from pathlib import Path

# RoFormer's Table 4: (maxlen, batch, steps) per stage.
TABLE_4 = ((512, 256, 200_000), (1536, 256, 12_500), (256, 256, 120_000), (128, 512, 80_000),
           (1536, 256, 10_000), (512, 512, 30_000))


def _long_share(stages) -> float:
    longest = max(length for length, _, _ in stages)
    tokens = [length * batch * steps for length, batch, steps in stages]
    return sum(t for t, (length, _, _) in zip(tokens, stages, strict=True)
               if length == longest) / sum(tokens)


def values(study: Path) -> dict[str, float]:
    run = next((study / "results").glob("schedule=roformer,*/stages.json"))
    stages = [(s["seq_len"], s["batch_size"], s["steps"])
              for s in json.loads(run.read_text())["stages"]]
    return {"long_share": _long_share(stages), "long_share:published": _long_share(TABLE_4)}
