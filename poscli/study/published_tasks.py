"""The length-generalization study beside Kazemnejad et al. (2023) and Ruoss et al. (2023).

Neither paper publishes a table this comparison could copy number for number at poscli's sizes:
Kazemnejad et al. report their per-task results as figures and summarise them as a ranking of the
five encodings they test (NoPE first, then T5's relative bias, ALiBi, Rotary and absolute
position embeddings); Ruoss et al. summarise theirs as a mean gain of randomized positions over
the encodings they randomize (12.0 points of accuracy, over 15 tasks, trained to length 40 and
tested to 500). So the comparison is of orderings and of that gain: for every pair the paper
orders, whether poscli's paired, Holm-corrected decision at 2x the training size agrees, differs
or does not decide (``poscli.evaluation.generalization.decisions``). Nothing here is written by
hand about a particular result: rerunning the recipe rewrites it.
"""

from __future__ import annotations

from itertools import combinations

# Kazemnejad et al. (2023), the ranking of their five encodings over their tasks (abstract and
# Section 4: "NoPE outperforms", then T5's relative PE, ALiBi, Rotary, APE), best first.
KAZEMNEJAD_2023_ORDER = ("none", "t5", "alibi", "rope", "sinusoidal")
KAZEMNEJAD_NAMES = {
    "none": "NoPE",
    "t5": "T5 bias",
    "alibi": "ALiBi",
    "rope": "Rotary",
    "sinusoidal": "APE (sinusoidal)",
}
RUOSS_2023_GAIN = 0.120  # Ruoss et al. (2023), abstract: randomized positions raise test accuracy by 12.0% on average
RANDOMIZED = "+random"  # the suffix of a group trained with --random-positions: rope+random


def encoding_of(group: str, pe: str, meta: dict) -> str:
    """The encoding a group stands for in the comparison: its --pe, with +random where it was
    trained with random positions (rope+random)."""
    return pe + RANDOMIZED if (meta.get(group) or {}).get("random_positions") else pe


def kazemnejad2023(summary, meta: dict) -> str:
    """Per task: poscli's ranking up to 2x the largest training size beside Kazemnejad et al.'s, every
    pair the paper orders as agreeing, differing or undecided; then randomized RoPE against RoPE
    beside Ruoss et al.'s mean gain."""
    from poscli.evaluation.generalization import band_label, band_means, decisions

    found = decisions(summary)
    encodings = {row.group: encoding_of(row.group, row.pe, meta) for row in summary.itertuples()}
    lines = [
        "### Beside Kazemnejad et al. (2023) and Ruoss et al. (2023)\n",
        "Published (Kazemnejad et al., 2023): over their tasks, trained on instances up to length 20 and tested to "
        "40, " + " > ".join(KAZEMNEJAD_NAMES[pe] for pe in KAZEMNEJAD_2023_ORDER) + ". Published (Ruoss et al., "
        f"2023): randomized positions raise test accuracy by {RUOSS_2023_GAIN * 100:.1f} points on average (15 tasks, "
        "trained to 40, tested to 500).\n",
        "poscli: exact match beyond the largest training size N up to 2N (each seed's mean over those sizes, then the "
        "mean over the seeds that mastered the task; Kazemnejad et al. test up to 2x their training length). A pair "
        "the paper orders *agrees* where poscli's paired test (Holm-corrected) supports the same order, *differs* "
        "where it supports the opposite, and is *undecided* where it supports neither.\n",
        "| task | sizes | poscli, highest first | agrees | differs | undecided | not comparable |",
        "|---|---|---|---|---|---|---|",
    ]
    gains = []
    for task, part in summary.groupby("task", sort=True):
        means = band_means(summary, task, 2)  # group -> (mean, low, high, seeds)
        groups = {encodings[group]: group for group in part["group"].unique()}
        accuracy = {pe: (group, means[group][0]) for pe, group in groups.items() if group in means}
        order = sorted((a, pe) for pe, (_, a) in accuracy.items())
        ranking = ", ".join(f"{pe} {a:.2f}" for a, pe in reversed(order))
        tally: dict[str, list[str]] = {"agrees": [], "differs": [], "undecided": [], "not comparable": []}
        mine = found[(found["task"] == task) & (found["factor"] == 2)]
        for better, worse in combinations(KAZEMNEJAD_2023_ORDER, 2):
            tally[_pair_outcome(mine, accuracy.get(better, (None,))[0], accuracy.get(worse, (None,))[0])].append(
                f"{better}>{worse}"
            )
        lines.append(
            f"| {task} | {band_label(int(part['largest'].iloc[0]), 2)} | {ranking or 'no encoding mastered'} | "
            + " | ".join(_pairs_cell(tally[key]) for key in ("agrees", "differs", "undecided", "not comparable"))
            + " |"
        )
        for randomized in sorted(key for key in groups if key.endswith(RANDOMIZED)):  # mastered or not
            plain = randomized.removesuffix(RANDOMIZED)
            if plain in groups:
                gains.append((f"{task}, {plain}", _pair_row(mine, groups[randomized], groups[plain])))
    lines += ["", *_randomized_lines(gains)]
    return "\n".join(lines) + "\n"


def _pair_outcome(decided, better: str | None, worse: str | None) -> str:
    """How poscli's decision for a pair the paper orders (``better`` > ``worse``) compares."""
    if better is None or worse is None:
        return "not comparable"
    row = _pair_row(decided, better, worse)
    if row is None:
        return "not comparable"  # fewer than two seeds mastered in both
    if row["verdict"] == "≈":
        return "undecided"
    return "agrees" if row["verdict"] == ">" else "differs"


def _pair_row(decided, a: str | None, b: str | None) -> dict | None:
    """The decision for a against b (its signs flipped where it was taken as b against a)."""
    for first, second, sign in ((a, b, 1), (b, a, -1)):
        rows = decided[(decided["a"] == first) & (decided["b"] == second)]
        if len(rows):
            row = rows.iloc[0].to_dict()
            if sign < 0:
                row |= {
                    "difference": -row["difference"],
                    "low": -row["high"],
                    "high": -row["low"],
                    "verdict": {">": "<", "<": ">"}.get(row["verdict"], row["verdict"]),
                }
            return row
    return None


def _pairs_cell(pairs: list[str]) -> str:
    return f"{len(pairs)}" + (f" ({', '.join(pairs)})" if pairs else "")


def _randomized_lines(gains: list[tuple[str, dict | None]]) -> list[str]:
    """Randomized minus plain positions up to 2x, per task and encoding, with the paired interval and verdict."""
    if not gains:
        return ["No task has an encoding both with and without random positions; Ruoss et al.'s gain is not compared."]
    lines = ["Random positions minus plain, up to 2x (paired over seeds; Ruoss et al.: +12.0 points on average):", ""]
    for task, row in gains:
        if row is None:
            lines.append(f"- {task}: not comparable (fewer than two seeds mastered in both).")
            continue
        said = {">": "randomized positions higher", "<": "randomized positions lower", "≈": "no difference claimed"}
        lines.append(
            f"- {task}: {row['difference'] * 100:+.1f} points [{row['low'] * 100:+.1f}, "
            f"{row['high'] * 100:+.1f}], adjusted p {row['adjusted']:.3g}: {said[row['verdict']]}."
        )
    return lines
