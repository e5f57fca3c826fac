"""Validation curves (``--eval-every``): when a run's held-out loss stopped improving.

A fine-tune is compared only once it has converged: here, once its held-out loss at the train
length improved by less than 1% over the last fifth of its steps (issue 63). ``poscli plot loss``
writes the curves beside the figure (RUN, step, tokens, held-out loss) and says, for each run,
where that happened or how much the last fifth still gained.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

TOLERANCE, FRACTION = 0.01, 0.2  # less than 1% better over the last fifth of the steps


def last_fraction_gain(steps: list[int], losses: list[float], at: int, fraction: float = FRACTION) -> float:
    """The relative improvement of the held-out loss from step (1 - fraction) x ``at`` to ``at``
    (the curve interpolated linearly between its points): (L(0.8 S) - L(S)) / L(0.8 S); nan where
    the curve does not reach back that far."""
    start = (1 - fraction) * at
    if not steps or start < steps[0] or at > steps[-1]:
        return float("nan")
    before, now = np.interp(start, steps, losses), np.interp(at, steps, losses)
    return float((before - now) / before)


def converged_at(steps: list[int], losses: list[float], tolerance: float = TOLERANCE) -> int | None:
    """The first step of the curve at which the last fifth of the steps up to it gained less than
    ``tolerance``; None where every point still gains that much."""
    for step in steps:
        gain = last_fraction_gain(steps, losses, step)
        if gain == gain and gain < tolerance:
            return step
    return None


def convergence_line(name: str, steps: list[int], losses: list[float]) -> str:
    """What a run's validation curve says about its budget, in one line."""
    if len(steps) < 2:
        return f"{name}: no validation curve (train with --eval-every N)"
    gain = last_fraction_gain(steps, losses, steps[-1])
    at = converged_at(steps, losses)
    last = f"its last fifth ({round(0.8 * steps[-1])}-{steps[-1]}) gained {gain:.1%}"
    if at is None:
        return f"{name}: still improving at step {steps[-1]}: {last}"
    return f"{name}: the held-out loss gained less than {TOLERANCE:.0%} over the last fifth from step {at}; {last}"


def write_curves(curves: dict[str, dict], path: Path) -> list[Path]:
    """PATH (a .csv): every run's validation curve, one row a point at one length; and PATH with .md:
    where each stopped improving at its train length (``convergence_line``). Nothing where no run
    has a curve."""
    import pandas as pd

    rows = [{"run": name, "length": curve["length"], "step": step, "tokens": tokens, "heldout_loss": loss}
            for name, curve in curves.items()
            for step, tokens, loss in zip(curve["heldout_steps"], *curve["heldout_curve"])]  # fmt: skip
    steps_of = {name: dict(zip(curve["heldout_curve"][0], curve["heldout_steps"])) for name, curve in curves.items()}
    rows += [{"run": name, "length": length, "step": steps_of[name].get(tokens), "tokens": tokens, "heldout_loss": loss}
             for name, curve in curves.items()
             for length, (tokens_seen, losses) in (curve.get("heldout_longer") or {}).items()
             for tokens, loss in zip(tokens_seen, losses)]  # fmt: skip
    if not rows:
        return []
    pd.DataFrame(rows).to_csv(path, index=False)
    lines = [
        convergence_line(name, curve["heldout_steps"], curve["heldout_curve"][1]) for name, curve in curves.items()
    ]
    note = (
        f"Held-out loss at each run's train length every few steps (`--eval-every`); a run has converged from the "
        f"first step at which the last fifth of its steps gained under {TOLERANCE:.0%} (poscli.evaluation.curves)."
    )
    path.with_suffix(".md").write_text("\n".join([note, "", *(f"- {line}" for line in lines)]) + "\n", encoding="utf-8")
    return [path, path.with_suffix(".md")]
