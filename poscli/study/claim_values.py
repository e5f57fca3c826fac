"""The numbers a claim's test reads from its table: each seed's loss or accuracy per group at a
length (a band of sizes for a task), from the same spans, for the paired or the Welch test."""

from __future__ import annotations

from poscli.study.claims import BASE, NULL, Claim


def values_of(info: dict, summary, rows, learned: dict[str, str]):
    """The per-seed values a claim of this table is decided on, as ``decide`` reads them:
    ``values(claim, length) -> (compare's, against's)`` over the learned runs. summary: the table's
    summary over learned runs; rows: its rows; learned: run -> group, the runs that passed their gate."""
    kind = info["kind"]
    if kind == "perplexity":
        return lambda claim, length: _perplexity_values(summary, info, claim, length)
    if kind == "algorithmic":
        return lambda claim, length: _band_values(summary, claim, length)
    return lambda claim, length: _passkey_values(rows, learned, info, claim, length)


def against_group(claim: Claim, info: dict) -> str:
    return info["parent"][claim.compare] if claim.against == BASE else claim.compare if claim.against == NULL else \
        claim.against  # fmt: skip


def _perplexity_values(summary, info: dict, claim: Claim, length: int):
    """Each learned seed's mean loss (nats per token) over the table's spans at ``length``: the
    difference of two is the log of their perplexity ratio."""
    from poscli.study.paired import null_summary

    def losses(source, group):
        found = None if source is None else source.attrs.get("run_losses", {}).get((group, length))
        return None if found is None else (found[0], dict(zip(found[2], found[1])))

    if summary is None:  # no group has runs enough that learned
        return {}, {}
    other_source = null_summary(summary, claim.compare, length) if claim.against == NULL else summary
    mine, theirs = losses(summary, claim.compare), losses(other_source, against_group(claim, info))
    if mine is not None and theirs is not None:
        return (mine[1], theirs[1]) if mine[0] == theirs[0] else None
    if claim.against == NULL and mine is not None:
        return None  # scored, but no null beside it
    absent = [group for group, found in ((claim.compare, mine), (against_group(claim, info), theirs)) if found is None]
    if all(_absent(summary, group, length) for group in absent):  # every seed gated out: none learned
        return ({} if mine is None else mine[1]), ({} if theirs is None else theirs[1])
    return None


def _absent(summary, group: str, length: int) -> bool:
    """Whether a group has no learned run at all at ``length`` (every seed gated out)."""
    return summary[(summary["group"] == group) & (summary["length"] == length)].empty


def _band_values(summary, claim: Claim, factor: int):
    """Each mastered seed's exact match over the band of sizes up to ``factor`` x the largest
    training size (``generalization.band_values``)."""
    from poscli.evaluation.generalization import band_values

    part = summary[summary["task"] == claim.task] if summary is not None else None
    if part is None or part.empty:
        return {}, {}
    values = band_values(part, factor)
    return values.get(claim.compare, {}), values.get(claim.against, {})


def _passkey_values(rows, learned: dict[str, str], info: dict, claim: Claim, length: int):
    """Each learned seed's passkey accuracy at ``length``, one key, pooled over depths."""
    from poscli.evaluation.seeds import seed_keys

    def accuracies(group: str) -> dict[str, float]:
        members = sorted(run for run, g in learned.items() if g == group)
        part = rows[rows["run"].isin(members) & (rows["length"] == length)]
        if "keys" in part:
            part = part[part["keys"].fillna(1) == 1]
        pooled = part.groupby("run")[["correct", "trials"]].sum()
        pooled = pooled[pooled["trials"] > 0]
        keys = dict(zip(sorted(members), seed_keys(group, members)))
        return {keys[run]: float(row.correct / row.trials) for run, row in pooled.iterrows()}

    return accuracies(claim.compare), accuracies(against_group(claim, info))
