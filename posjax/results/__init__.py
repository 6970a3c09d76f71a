"""Reporting: result files into pictures, tables and README values.

    plots     one run, several runs or a sweep: extrapolation curves, tables, task and theta
              plots (posjax plot)
    heatmap   retrieval results: a heatmap per run or per sweep point, accuracy curves
    report    a study's plots and the generated blocks of its README and docs/ (posjax report)
    values    the numbers READMEs quote, computed from raw files
    seeds     several seeds' means and intervals, paired comparisons
    smoke     the line a smoke run's pictures and tables carry: it checks the set-up only
    ranking   encodings ranked across task results (mean reciprocal rank)
    analysis  RoPE's long-range decay bound and critical dimension (posjax analyze)

It reads the result files `posjax.eval` wrote, each naming its report ("report"), draws
every picture (a retrieval result's own heatmap included), imports nothing from posjax.eval
and never scores anything itself. Importing plots, heatmap, report or values loads no jax
and no posjax.config (whose package loads the data, encoders and models), so
scripts/collect_results.py answers a wrong folder without waiting for them; `values` counts
a study's parameters by building its models, and imports them then.
"""
