"""``poscli inspect RUN...``: each run's attention at each length on ``poscli eval``'s spans, and the
angle coverage of every rotary run, as rows of five tables.

- summary: per run, length and layer (and "all" layers): the attention entropy of the window's later
  half of queries beside log(keys seen), its ratio to the same layer's at the run's own train length,
  the 50% and 90% spans, the share on the first keys, and the effective context;
- entropy: the entropy by query-position bucket, per layer and head;
- mass: the share within each distance, per layer (and head);
- angles: ``poscli.evaluation.inspection.angles.coverage_rows`` for rotary runs (and ``hf:`` models' configs);
- frequencies: each rotary pair's mean query and key norm per layer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from poscli.core.device import select_device
from poscli.evaluation.by_position import effective_context, loss_by_position, position_curve
from poscli.evaluation.evaluate import load_any, null_context, planned_sets, reference_token_losses
from poscli.evaluation.inspection.angles import coverage_rows, pretrained_frequencies, run_frequencies
from poscli.evaluation.inspection.attention_maps import QUANTILES, SINK_TOKENS
from poscli.evaluation.inspection.measure import check_inspectable, inspect_length, mean_interval, per_span
from poscli.model import pretrained

SPAN_COLUMNS = [f"span{round(q * 100)}" for q in QUANTILES]


def inspect_runs(
    run_names: list[str],
    lengths: list[int] | None,
    results: str | Path | None = None,
    max_tokens: int = 32768,
    device: str = "auto",
    progress=None,
) -> dict[str, list[dict]]:
    """Every run at every length (each run's own train length added where missing, for the ratios) on
    one evaluation set per corpus; ``hf:`` models get their angle coverage only (from the config).
    Every run is loaded and checked before any is measured. -> {"summary", "entropy", "mass", "angles",
    "frequencies": rows}."""
    device = select_device(device)
    tables: dict[str, list[dict]] = {name: [] for name in ("summary", "entropy", "mass", "angles", "frequencies")}
    local = [name for name in run_names if not pretrained.is_pretrained(name)]
    for name in run_names:
        if pretrained.is_pretrained(name):
            frequencies = pretrained_frequencies(name, pretrained.transformers_config(name))
            tables["angles"] += coverage_rows(
                frequencies, lengths or [frequencies.train_length * k for k in (1, 4, 16)]
            )
    if not local:
        return tables
    plans, eval_sets, corpora, homes = planned_sets(local, lengths, results, max_tokens)
    three_gram = {
        key: reference_token_losses(corpora, homes[key], eval_set, corpora.tokenizers[key.fingerprint])
        for key, eval_set in eval_sets.items()
    }  # (S, span_length) each: the loss-by-position offset of the effective context, as eval reads it
    loaded = []
    for plan in plans:
        model, config = load_any(str(plan.folder), None, str(device))
        check_inspectable(config["name"], model)
        loaded.append((plan, model, config))
    entropies: dict[str, dict[int, np.ndarray]] = {}  # run -> length -> (S,) entropy over layers and heads
    parents: dict[str, tuple[str | None, int]] = {}
    for plan, model, config in loaded:
        identity = {"run": config["name"], "label": config.get("label", config["name"]), "pe": config["model"]["pe"]}
        measured = {}
        eval_set = eval_sets[plan.key]
        reference = null_context(config)  # its own train length (an extension's base's), for the ratios
        lengths = {*plan.lengths, *([reference] if reference <= eval_set.span_length else [])}
        for length in sorted(lengths):
            task = progress.add_task(f"{identity['run']} @ {length}", total=len(eval_set.windows(length))) if progress \
                else None  # fmt: skip
            advance = (lambda n, task=task: progress.advance(task, n)) if progress else None
            measured[length] = inspect_length(model, config, eval_set, length, device, advance)
            measured[length]["effective_context"] = _context(measured[length]["positions"], three_gram[plan.key],
                                                             eval_set, length)  # fmt: skip
        _add_rows(tables, identity, measured)
        entropies[identity["run"]] = {length: per_span(result["spans"], "late")[..., 0].mean((1, 2))
                                      for length, result in measured.items()}  # fmt: skip
        parents[identity["run"]] = (config.get("parent"), reference)
        frequencies = run_frequencies(identity["run"], model.config)
        if frequencies is not None:
            tables["angles"] += coverage_rows(frequencies, sorted(measured))
    _beside_bases(tables["summary"], entropies, parents)
    return tables


def _context(buckets: list[dict], three_gram: np.ndarray | None, eval_set, length: int) -> tuple[int, bool]:
    """The effective context from the loss by position less the 3-gram's on the same windows (as
    ``poscli eval``'s table reads it); on a set in other tokens, from the loss alone."""
    if three_gram is None:
        return effective_context(buckets)
    position_loss, position_tokens = position_curve(three_gram, eval_set, length)
    return effective_context(buckets, loss_by_position(position_loss, position_tokens, len(position_loss)))


def _beside_bases(summary: list[dict], entropies: dict, parents: dict) -> None:
    """An extension inspected with its base: its entropy at each length over the base's at the base's train
    length, paired over the spans both read (methods from one base: a physical pair), in
    ``base_entropy_ratio`` (NaN elsewhere). Does YaRN's temperature keep the entropy at its target where
    the base had it at its train length (Peng et al., 2023, section 3.4)?"""
    for row in summary:
        row.update(base_entropy_ratio=np.nan, base_entropy_ratio_low=np.nan, base_entropy_ratio_high=np.nan)
        parent, reference = parents[row["run"]]
        base = entropies.get(parent, {}).get(reference)
        mine = entropies[row["run"]][row["length"]]
        if row["layer"] != "all" or base is None or len(base) != len(mine):
            continue
        ratio, low, high = mean_interval(mine / base)
        row.update(base_entropy_ratio=ratio, base_entropy_ratio_low=low, base_entropy_ratio_high=high)


def _add_rows(tables: dict[str, list[dict]], identity: dict, measured: dict[int, dict]) -> None:
    """One run's rows of every table, from ``inspect_length``'s result at each length."""
    reference = next(iter(measured.values()))["reference_length"]
    late_at = {length: per_span(result["spans"], "late") for length, result in measured.items()}  # (S, L, H, 5)
    for length, result in measured.items():
        sums = result["spans"]
        spans = len(late_at[length])
        base = {**identity, "length": length, "train_length": reference, "spans": spans, "eval_set": result["eval_set"]}
        tables["summary"] += _summary_rows(base, late_at, length, reference, result["effective_context"])
        entropy = per_span(sums, "entropy")  # (S, L, H, buckets)
        mean, low, high = mean_interval(entropy)
        for layer in range(mean.shape[0]):
            for head in range(mean.shape[1]):
                for index, (start, end) in enumerate(sums[0].buckets):
                    tables["entropy"].append(
                        {**base, "layer": layer, "head": head, "position_start": start, "position_end": end,
                         "entropy": mean[layer, head, index], "ci_low": low[layer, head, index],
                         "ci_high": high[layer, head, index],
                         "uniform": float(np.log(np.arange(start, end) + 1).mean())}
                    )  # fmt: skip
        tables["mass"] += _mass_rows(base, per_span(sums, "within"), sums[0].distances)
        for layer, norms in result["pair_norms"].items():
            for pair in range(norms.shape[-1]):
                tables["frequencies"].append(
                    {**base, "layer": layer, "pair": pair, "q_norm": float(norms[0, :, pair].mean()),
                     "k_norm": float(norms[1, :, pair].mean())}
                )  # fmt: skip


def _summary_rows(base: dict, late_at: dict, length: int, reference: int, context: tuple[int, bool]) -> list[dict]:
    """Per layer and over all layers: entropy, its ratio to the train length's (NaN when the train length
    was not inspected), uniform entropy, spans and sink share, each with its interval over spans."""
    late = late_at[length]  # (S, L, H, 3 + Q): entropy, sink, uniform, spans
    at_reference = late_at.get(reference)
    rows = []
    for layer in [*range(late.shape[1]), "all"]:
        values = _layer_mean(late, layer)  # (S, 3 + Q)
        mean, low, high = mean_interval(values)
        row = {**base, "layer": layer, "entropy": mean[0], "entropy_low": low[0], "entropy_high": high[0],
               "uniform_entropy": mean[2], "sink": mean[1], "sink_low": low[1], "sink_high": high[1],
               "effective_context": context[0], "context_open_ended": context[1]}  # fmt: skip
        if at_reference is not None and len(at_reference) == len(values):  # the same spans: a paired ratio
            ratios = values[:, 0] / _layer_mean(at_reference, layer)[:, 0]
            ratio, ratio_low, ratio_high = mean_interval(ratios)
            row.update(entropy_ratio=ratio, entropy_ratio_low=ratio_low, entropy_ratio_high=ratio_high)
        else:
            row.update(entropy_ratio=float("nan"), entropy_ratio_low=float("nan"), entropy_ratio_high=float("nan"))
        for index, column in enumerate(SPAN_COLUMNS):
            row.update({column: mean[3 + index], f"{column}_low": low[3 + index], f"{column}_high": high[3 + index]})
        row.update(_span_growth(late_at, length, layer, values))
        rows.append(row)
    return rows


def _span_growth(late_at: dict, length: int, layer, values: np.ndarray) -> dict:
    """The 90% span at ``length`` over the span at the next shorter length inspected, paired over the spans
    both read (the model against itself): does its attention reach further as the window grows?"""
    shorter = [n for n in late_at if n < length]
    growth = {"span90_growth": np.nan, "span90_growth_low": np.nan, "span90_growth_high": np.nan}
    if not shorter or len(late_at[max(shorter)]) != len(values):
        return {**growth, "span90_from": np.nan}
    span = 3 + SPAN_COLUMNS.index("span90")
    before = _layer_mean(late_at[max(shorter)], layer)[:, span]
    ratio, low, high = mean_interval(values[:, span] / np.maximum(before, 1e-9))
    return {"span90_growth": ratio, "span90_growth_low": low, "span90_growth_high": high, "span90_from": max(shorter)}


def _layer_mean(values: np.ndarray, layer) -> np.ndarray:
    """(S, L, H, K) -> (S, K): one layer's mean over heads, or every layer's ("all")."""
    return values.mean((1, 2)) if layer == "all" else values[:, layer].mean(1)


def _mass_rows(base: dict, within: np.ndarray, distances: list[int]) -> list[dict]:
    """The share of attention within each distance: per layer and head, and per layer over heads.
    within: (S, L, H, G)."""
    rows = []
    for layer in range(within.shape[1]):
        for head in [*range(within.shape[2]), "all"]:
            values = within[:, layer].mean(1) if head == "all" else within[:, layer, head]  # (S, G)
            mean, low, high = mean_interval(values)
            for index, distance in enumerate(distances):
                rows.append(
                    {**base, "layer": layer, "head": head, "distance": distance, "within": mean[index],
                     "ci_low": low[index], "ci_high": high[index]}
                )  # fmt: skip
    return rows


SUMMARY_NOTE = (
    f"entropy, spans and sink: the mean over a window's later half of queries (positions n/2 .. n - 1); sink: the "
    f"share on the first {SINK_TOKENS} keys; intervals: 95% t over spans"
)
