"""Summaries over seeds of a perplexity table: each group of runs (runs that differ only in seed) at
each length, with intervals over seeds and the evaluation sample, and the markdown that shows them
(``TABLE-seeds.csv`` / ``.md``, written by ``poscli run``)."""

from __future__ import annotations

from poscli.core.lengths import parse_length
from poscli.evaluation.evalset import mode_name
from poscli.evaluation.reference import REFERENCE_RUN
from poscli.evaluation.stats import bootstrap_perplexity, interval
from poscli.evaluation.tables import format_interval, format_ppl, pivot_markdown

SEEDS_SUFFIX = "-seeds"  # TABLE-seeds.csv / .md / .png: mean and spread over seeds (poscli run)


def table_mode(stride) -> str:
    """A perplexity table's mode for a stride as a recipe writes it (``"1k"``, or None)."""
    return mode_name(None if stride is None else parse_length(str(stride), "--stride"))


REFERENCE_GROUP = "3-gram (no positions)"


def seed_summary(
    rows,
    spans,
    groups: dict[str, str],
    stride=None,
    protocol: str = "stream",
    min_runs: int = 2,
    mode: str | None = None,
):
    """Per group of runs (runs that differ only in seed) and length: mean, sd, min, max of
    perplexity over the runs; ci_low / ci_high, the 95% interval of the mean from a two-level
    bootstrap (runs, then evaluation units, ``poscli.evaluation.stats``); ratio / ratio_low / ratio_high,
    the mean at the length over the mean at the group's train length (or its shortest length),
    bootstrapped with the same draws, so the ratio's interval is paired. The reference row of
    the table (if any) is a group of its own. rows / spans: a perplexity table and its
    TABLE_spans.csv (None: intervals are left empty). None when no group has ``min_runs`` runs.
    ``mode`` (default: the stride's) picks other rows, e.g. "truncated-128" (the truncation null).
    ``summary.attrs["run_losses"][(group, length)]``: (evaluation set, [mean loss of each run, in
    run-name order], [each run's seed key, ``seed_keys``]), for paired tests over seeds
    (``poscli.study.paired.seed_log_ratios``)."""
    import numpy as np
    import pandas as pd

    mode = mode or table_mode(stride)
    keep = (rows["mode"] == mode) & (rows["protocol"] == protocol if "protocol" in rows.columns else True)
    rows = rows[keep & (rows["run"].isin(list(groups)) | (rows["run"] == REFERENCE_RUN))].copy()
    rows["group"] = rows["run"].map({**groups, REFERENCE_RUN: REFERENCE_GROUP})
    if rows.empty or rows.groupby("group")["run"].nunique().max() < min_runs:
        return None
    if spans is not None:
        spans = spans[(spans["mode"] == mode) & (spans["protocol"] == protocol)]
    records, paired, run_losses = [], {}, {}
    for group, part in rows.groupby("group", sort=False):
        lengths = sorted(part["length"].unique())
        train_length = int(part["train_length"].iloc[0])
        base_length = train_length if train_length in lengths else lengths[0]
        samples, mine = {}, []
        for length in lengths:
            cell = part[(part["length"] == length) & part["ppl"].notna()]
            record = _cell_record(group, part, cell, train_length, length)
            drawn = _span_samples(spans, cell, length) if spans is not None and len(cell) else None
            if drawn is not None:
                samples[length], count, losses = drawn
                record["ci_low"], record["ci_high"] = interval(samples[length])
                paired[(group, length)] = (record["eval_set"], count, samples[length])
                run_losses[(group, length)] = (record["eval_set"], losses, seed_keys(group, cell["run"]))
            mine.append(record)
        _add_ratios(mine, samples, base_length)
        records += mine
    summary = pd.DataFrame(records)
    for column in ("ratio", "ratio_low", "ratio_high"):
        if column not in summary:
            summary[column] = np.nan
    # The resamples behind each cell, for paired comparisons between groups (poscli.study.published): the
    # same seeded draws of units and of run positions, so groups evaluated on the same spans with
    # runs in the same seed order are compared draw by draw.
    summary.attrs["samples"] = paired
    summary.attrs["run_losses"] = run_losses
    return summary


def seed_keys(group: str, runs) -> list[str]:
    """What each run's name puts where its group has the wildcard, in run-name order: ``0`` for
    ``tstl-fox-s0@625`` in ``tstl-fox-s*@625`` and for ``xt-rope-s0+yarn-1k-0`` in
    ``xt-rope-s*+yarn-1k-0``; so two groups pair the runs of the same seed. A run its group does
    not match by a wildcard keys by its own name."""
    import fnmatch
    import re

    pattern = re.compile(fnmatch.translate(group).replace(".*", "(.*)", 1)) if "*" in group else None
    keys = []
    for run in sorted(runs):
        found = pattern.fullmatch(run) if pattern else None
        keys.append(found.group(1) if found and found.groups() else run)
    return keys


def _cell_record(group: str, part, cell, train_length: int, length: int) -> dict:
    """One group at one length: the spread of its runs' perplexities (intervals filled in later)."""
    nan = float("nan")
    notes = sorted({n for n in part["note"] if n and not n.startswith("n/a")}) if "note" in part else []
    return {
        "group": group,
        "pe": part["pe"].iloc[0],
        "corpus": ",".join(sorted(set(part["corpus"].astype(str)))) if "corpus" in part else "",
        "train_length": train_length,
        "length": length,
        "seeds": len(cell),
        "mean": cell["ppl"].mean() if len(cell) else nan,
        "sd": cell["ppl"].std() if len(cell) > 1 else nan,
        "min": cell["ppl"].min() if len(cell) else nan,
        "max": cell["ppl"].max() if len(cell) else nan,
        "ci_low": nan,
        "ci_high": nan,
        "spans": int(cell["spans"].max()) if len(cell) and "spans" in cell else 0,
        "documents": int(cell["documents"].max()) if len(cell) and "documents" in cell else 0,
        "tokens": int(cell["tokens"].max()) if len(cell) else 0,
        "parameters": float(cell["parameters"].mean()) if len(cell) and "parameters" in cell else nan,
        "tokens_seen": float(cell["tokens_seen"].mean()) if len(cell) and "tokens_seen" in cell else nan,
        "eval_set": ",".join(sorted(set(cell["eval_set"].astype(str)))) if "eval_set" in cell else "",
        "note": "; ".join(notes),
    }


def _span_samples(spans, cell, length: int):
    """The two-level bootstrap of one cell from its runs' span losses: (resamples, runs, each run's
    mean loss), or None when a run's spans are missing."""
    mine = spans[spans["run"].isin(list(cell["run"])) & (spans["length"] == length)]
    matrix = mine.pivot_table(index="run", columns="span", values="loss", aggfunc="sum")
    if len(matrix) != len(cell) or matrix.isna().any().any():
        return None
    first = mine[mine["run"] == matrix.index[0]].sort_values("span")
    weights = first["tokens"].to_numpy(float)
    samples = bootstrap_perplexity(matrix.to_numpy(), weights, first["unit"].to_numpy())
    return samples, len(matrix), list(matrix.sum(axis=1).to_numpy() / weights.sum())


def _add_ratios(records: list[dict], samples: dict, base_length: int) -> None:
    """Each length's mean over the base length's, with the paired interval of the resampled ratio."""
    base = next(r["mean"] for r in records if r["length"] == base_length)
    for record in records:
        length = record["length"]
        if length in samples and base_length in samples:
            record["ratio"] = record["mean"] / base
            record["ratio_low"], record["ratio_high"] = interval(samples[length] / samples[base_length])
        record["ratio_base"] = base_length


def seed_markdown(summary) -> str:
    scored = summary[summary["tokens"] > 0]
    first = scored.iloc[0] if len(scored) else None
    sample = (
        f" Every length scores the same {int(first['tokens']):,} tokens ({int(first['spans'])} spans from "
        f"{int(first['documents'])} documents, evaluation set {first['eval_set']})."
        if first is not None
        else ""
    )
    lines = [
        "Perplexity, mean over seeds, with its 95% interval from a two-level bootstrap (seeds, then the evaluation "
        f"sample).{sample} `n/a`: no representation at that length.\n",
    ]
    notes = sorted({n for n in summary["note"].fillna("") if n})
    lines += [f"Note: {note}.\n" for note in notes]
    lines += pivot_markdown(
        summary,
        "group",
        {
            "runs": lambda first: first["group"],
            "pe": lambda first: first["pe"],
            "seeds": lambda first: int(summary[summary["group"] == first["group"]]["seeds"].max()),
        },
        lambda cell: (
            "n/a"
            if cell["seeds"].iloc[0] == 0
            else f"{format_ppl(cell['mean'].iloc[0])} "
            f"{format_interval(cell['ci_low'].iloc[0], cell['ci_high'].iloc[0])}".strip()
        ),
        sort=False,
    )
    return "\n".join(lines) + "\n"
