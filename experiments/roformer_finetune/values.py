"""The numbers the README quotes, from results/ here:

    NAME:acc@L[:lo|hi]       doc_match test accuracy fine-tuned and read at L tokens, mean
                             over seeds and interval (posjax.results.seeds.interval); NAME
                             the pretrained encoding, or `scratch` (no pretraining)
    NAME:gain[:lo|hi]        accuracy at the longer length minus at the shorter, per seed
    NAME:ceiling@L           what any reader of L tokens can reach on the test split
    NAME:visible@L           the share of test triplets whose evidence L tokens read
    mlm:ENC:stageS.final_acc the pretraining's MLM accuracy over stage S's last steps (one run)
    provenance:runs|commits|dirty  the fine-tune runs, the commits they trained at and how
                             many of them had uncommitted changes (config.json's provenance);
                             schedule/provenance:... the same of every run of schedule/
    schedule/ARM:acc@L, :gain  the same for schedule/'s RoPE fine-tunes of the pretraining of
                             seed 0, ARM the pretraining (roformer: the six-stage schedule;
                             single: one length)
    schedule/ARM:pretrained@L[:lo|hi], :pretrained_gain  per pretraining seed the mean over
                             its fine-tune seeds, then mean and interval over the
                             pretrainings; schedule/ARM:pretrainings how many
"""

import json
from pathlib import Path

from posjax.results import finetune, plots
from posjax.results.values import add_interval

READS = ("schedule",)


def summary(study: Path) -> dict:
    """The fine-tune sweeps' accuracies over seeds, from their raw results (finetune.json is
    this, as posjax plot draws it)."""
    sweeps = sorted((study / "results").glob("ft_*"))
    return finetune.summarize(plots.load_results(sweeps))


def _name(row: dict) -> str:
    return row["encoding"] if row["init_from"] else "scratch"


def _accuracies(out: dict, rows: list[dict], name) -> None:
    """NAME:acc@L, :ceiling@L, :visible@L and NAME:gain of summary rows, NAME = name(row)."""
    per_seed: dict[str, dict[int, dict[int, float]]] = {}
    for row in rows:
        if row["length"] != row["finetune_len"]:
            continue
        label, length = name(row), row["length"]
        add_interval(out, f"{label}:acc@{length}", row["acc"])
        out[f"{label}:ceiling@{length}"] = row["ceiling"]
        out[f"{label}:visible@{length}"] = row["visible"]
        for seed, acc in zip(row["seeds"], row["acc"], strict=True):
            per_seed.setdefault(label, {}).setdefault(seed, {})[length] = acc
    for label, seeds in per_seed.items():
        gains = [accs[max(accs)] - accs[min(accs)] for accs in seeds.values() if len(accs) > 1]
        if gains:
            add_interval(out, f"{label}:gain", gains)


def values(study: Path) -> dict[str, float]:
    results = study / "results"
    out: dict[str, float] = {}
    _accuracies(out, summary(study)["rows"], _name)
    # schedule/: RoPE pretrained with the schedule and at one length; ft_ARM fine-tunes the
    # pretraining of seed 0, ft_ARM_seedK that of seed K
    for arm in ("roformer", "single"):
        sweeps = sorted((study / "schedule" / "results").glob(f"ft_{arm}*"))
        by_pretraining = [finetune.summarize(plots.load_results([sweep]))["rows"]
                          for sweep in sweeps]
        if not by_pretraining:
            continue
        _accuracies(out, by_pretraining[0], lambda row, arm=arm: f"schedule/{arm}")
        pretrained: dict[str, list[float]] = {}
        for rows in by_pretraining:
            means = {row["length"]: sum(row["acc"]) / len(row["acc"]) for row in rows
                     if row["length"] == row["finetune_len"]}
            for length, mean in means.items():
                pretrained.setdefault(f"pretrained@{length}", []).append(mean)
            pretrained.setdefault("pretrained_gain", []).append(means[max(means)]
                                                                - means[min(means)])
        out[f"schedule/{arm}:pretrainings"] = len(by_pretraining)
        for name, numbers in pretrained.items():
            add_interval(out, f"schedule/{arm}:{name}", numbers)
    for prefix, runs in (("", results.glob("ft_*/*/config.json")),
                         ("schedule/", (study / "schedule" / "results").glob("*/**/config.json"))):
        provenance = [json.loads(path.read_text()).get("provenance", {}) for path in runs]
        out[f"{prefix}provenance:runs"] = len(provenance)
        out[f"{prefix}provenance:commits"] = len({p.get("git_commit") for p in provenance})
        out[f"{prefix}provenance:dirty"] = sum(bool(p.get("git_dirty")) for p in provenance)
    for stages in results.glob("mlm_*/stages.json"):
        encoding = stages.parent.name.removeprefix("mlm_")
        for number, stage in enumerate(json.loads(stages.read_text())["stages"], 1):
            out[f"mlm:{encoding}:stage{number}.final_acc"] = stage["final_acc"]
    return out


def tables(study: Path) -> dict[str, str]:
    """finetune: the accuracies over seeds (posjax.results.finetune's table); pretraining:
    each pretraining run's MLM accuracy per stage of the schedule."""
    lines = ["| stage | maxlen | batch | steps | " + " | ".join(
        f"{p.parent.name.removeprefix('mlm_')} MLM acc"
        for p in sorted((study / "results").glob("mlm_*/stages.json"))) + " |"]
    runs = [json.loads(p.read_text())["stages"]
            for p in sorted((study / "results").glob("mlm_*/stages.json"))]
    lines.append("|---" * (4 + len(runs)) + "|")
    for number, stage in enumerate(runs[0], 1):
        lines.append(f"| {number} | {stage['seq_len']} | {stage['batch_size']} | "
                     f"{stage['steps']} | " + " | ".join(
                         f"{run[number - 1]['final_acc']:.1%}" for run in runs) + " |")
    return {"finetune": finetune.summary_table(summary(study)).rstrip("\n"),
            "pretraining": "\n".join(lines)}
