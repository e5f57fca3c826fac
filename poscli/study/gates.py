"""Which runs learned: the gate every run passes before a claim or a ranking may use it (issue 62).

A model that never learned says nothing about length: a fine-tuned extension scoring 1.35x the
context-free 3-gram at its own length did not converge, and ranking it beside the runs that did
reads its failure to train as a finding about its method. So every run of a published table is
gated, with the reason written beside it, and a run that fails is kept out of every claim and
every ranking of the file (it stays in the table over seeds, marked):

- a trained language model: perplexity at its train length at most ``three_gram`` (0.75) times the
  3-gram's on the same tokens;
- a fine-tuned extension: the same bound at the length it was fine-tuned at, and at the base's
  train length within ``base_drift`` (10%) of its base's perplexity there; one that fails "did not
  recover in N steps" (its budget);
- an extension without training: not gated (its failure is the finding), unless its base did not
  learn (then no extension of it did);
- an algorithmic task run: mastered at its training sizes (``generalization.MASTERY``);
- a passkey run: retrieves at its train length, the pooled accuracy at least ``retrieval`` (0.85,
  RULER's effective-length line); an extension's retrieval is the measurement, not a gate.

A run that fails its gate in one table of a recipe fails it in every table of the recipe (the
fine-tuned PI that did not converge in the perplexity table is kept out of the passkey claims too:
``merged``).

A recipe may set other bounds in its ``[gates]`` table (``three_gram``, ``base_drift``, ``retrieval``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from poscli.core.lengths import parse_length


@dataclass(frozen=True)
class GateBounds:
    three_gram: float = 0.75  # at most this many times the 3-gram's perplexity where the run trained
    base_drift: float = 0.10  # a fine-tuned extension within this share of its base at the base's train length
    retrieval: float = 0.85  # a passkey model's accuracy at its train length (RULER's effective-length line)

    @classmethod
    def names(cls) -> set[str]:
        return {f.name for f in fields(cls)}


@dataclass(frozen=True)
class Gate:
    run: str
    group: str
    learned: bool
    reason: str  # why, in words, with the numbers
    evaluated: bool = True  # False: the table holds no row of the run yet (a study under way)


NOT_EVALUATED = "not evaluated yet: no row of it in the table"


def fine_tuned(options: dict) -> bool:
    """Whether an extension's options fine-tune it (a method that never trains, or 0 steps: no)."""
    from poscli.study.paired import extension_steps

    return "method" in options and extension_steps(options) > 0


def perplexity_gates(rows, groups: dict[str, str], meta: dict, bounds: GateBounds, mode: str) -> dict[str, Gate]:
    """A gate for every run of a perplexity table (its rows of ``mode``), from its perplexity and
    the 3-gram row's on the same tokens. meta: group -> the options that made it."""
    from poscli.evaluation.reference import REFERENCE_RUN

    rows = rows[rows["mode"] == mode]
    reference = rows[rows["run"] == REFERENCE_RUN].groupby("length")["ppl"].first()
    ppl = rows[rows["run"] != REFERENCE_RUN].groupby(["run", "length"])["ppl"].first()

    def own(run: str, group: str, options: dict) -> Gate:
        if "method" in options and not fine_tuned(options):
            return Gate(run, group, True, "an extension without training: not gated")
        return _perplexity_gate(run, group, options, ppl, reference, bounds)

    return _bases_first(groups, meta, own, set(rows["run"]))


def _bases_first(groups: dict[str, str], meta: dict, own, evaluated: set[str]) -> dict[str, Gate]:
    """Every run's gate, bases before extensions: a run with no row in the table is not evaluated
    yet; an extension of a base that did not learn did not either; any other run gets
    ``own(run, group, options)``."""
    gates: dict[str, Gate] = {}
    for run, group in sorted(groups.items(), key=lambda item: "method" in meta.get(item[1], {})):
        options = meta.get(group, {})
        base = gates.get(options.get("parent", ""))
        if run not in evaluated:
            gates[run] = Gate(run, group, True, NOT_EVALUATED, evaluated=False)
        elif base is not None and not base.learned:
            gates[run] = Gate(run, group, False, f"its base {base.run} did not learn")
        else:
            gates[run] = own(run, group, options)
    return dict(sorted(gates.items()))


def _perplexity_gate(run: str, group: str, options: dict, ppl, reference, bounds: GateBounds) -> Gate:
    parent_options = options.get("parent_options", options)
    base_length = int(parent_options.get("train_length", 0) or 0)
    length = _trained_length(options, base_length) if "method" in options else base_length
    value, bound = ppl.get((run, length), math.nan), reference.get(length, math.nan)
    if math.isnan(value) or math.isnan(bound):
        return Gate(run, group, True, f"not gated: no perplexity of it and of the 3-gram at {length}")
    ratio = value / bound
    recovered = f"did not recover in {_steps(options)} steps: " if "method" in options else ""
    if ratio > bounds.three_gram:
        where = "where it was fine-tuned" if "method" in options else "at its train length"
        return Gate(run, group, False,
                    f"{recovered}{ratio:.2f}x the 3-gram {where} ({length}; bound {bounds.three_gram:g}x)")  # fmt: skip
    reason = f"{ratio:.2f}x the 3-gram at {length}"
    if "method" in options:
        mine, base = ppl.get((run, base_length), math.nan), ppl.get((options["parent"], base_length), math.nan)
        if not (math.isnan(mine) or math.isnan(base)):
            drift = mine / base - 1
            if drift > bounds.base_drift:
                return Gate(run, group, False, f"{recovered}{drift:+.0%} on its base's perplexity at the base's "
                            f"train length {base_length} (bound {bounds.base_drift:+.0%})")  # fmt: skip
            reason += f", {drift:+.1%} on its base at {base_length}"
    return Gate(run, group, True, reason)


def _steps(options: dict) -> int:
    """An extension's fine-tuning steps (its budget)."""
    from poscli.study.paired import extension_steps

    return extension_steps(options)


def _trained_length(options: dict, base_length: int) -> int:
    """The length an extension was fine-tuned at: its ``finetune_length``, else its method's default
    for its target (``default_finetune_length``: min(target, 4 x the base's), DroPE's the base's own)."""
    from poscli.extension import methods

    if options.get("finetune_length"):
        return parse_length(str(options["finetune_length"]), "finetune_length")
    target = parse_length(str(options["target"]), "target")
    return methods.get(options["method"]).default_finetune_length(target, base_length)


def task_gates(rows, groups: dict[str, str]) -> dict[str, Gate]:
    """A gate for every run of an algorithmic table: mastered at its training sizes."""
    from poscli.evaluation.generalization import MASTERY, mastery

    gates = {}
    for record in mastery(rows[rows["run"].isin(list(groups))]).itertuples():
        text = f"exact match {record.in_distribution:.2f} at its training sizes on {record.task} (mastery {MASTERY})"
        gates[record.run] = Gate(record.run, groups[record.run], bool(record.mastered), text)
    return gates


def passkey_gates(rows, groups: dict[str, str], meta: dict, bounds: GateBounds) -> dict[str, Gate]:
    """A gate for every run of a passkey table: a trained model retrieves at its train length (at least
    ``bounds.retrieval`` pooled over depths); an extension is gated by its base (and its perplexity)."""

    def own(run: str, group: str, options: dict) -> Gate:
        if "method" in options:  # what it retrieves is the measurement; its perplexity gates it where measured
            return Gate(run, group, True, "an extension: gated by its base and, where the recipe has one, by its "
                        "perplexity table")  # fmt: skip
        length = int(options.get("train_length", 0) or 0)
        part = rows[(rows["run"] == run) & (rows["length"] == length)]
        if "keys" in part:
            part = part[part["keys"].fillna(1) == 1]  # one key in the prompt, as trained
        if part.empty or part["trials"].sum() == 0:
            return Gate(run, group, True, f"not gated: no passkey trials at {length}")
        accuracy = part["correct"].sum() / part["trials"].sum()
        learned = bool(accuracy >= bounds.retrieval)
        return Gate(run, group, learned, f"retrieves {accuracy:.2f} at {length} (bound {bounds.retrieval:g})")

    return _bases_first(groups, meta, own, set(rows["run"]))


def merged(gates_by_table: dict[str, dict[str, Gate]]) -> dict[str, dict[str, Gate]]:
    """Each table's gates with every run that failed in another table of the recipe failed here too,
    with that table's reason."""
    failed: dict[str, tuple[str, str]] = {}
    for table, gates in gates_by_table.items():
        for gate in gates.values():
            if not gate.learned:
                failed.setdefault(gate.run, (table, gate.reason))
    result: dict[str, dict[str, Gate]] = {}
    for table, gates in gates_by_table.items():
        result[table] = {}
        for run, gate in gates.items():
            if gate.learned and run in failed:
                other, reason = failed[run]
                gate = Gate(run, gate.group, False, f"{reason} (in table {other})")
            result[table][run] = gate
    return result


def gates_markdown(gates: dict[str, Gate]) -> list[str]:
    """The published file's list of the runs that did not learn, each with its reason."""
    failed = [gate for gate in gates.values() if not gate.learned]
    evaluated = sum(gate.evaluated for gate in gates.values())
    waiting = len(gates) - evaluated
    lines = ["### Runs that did not learn\n"]
    if waiting:
        lines.append(f"{waiting} of the {len(gates)} runs have no row in the table yet: not gated.\n")
    if not failed:
        return [*lines, f"Every one of the {evaluated} evaluated runs passed its gate (see `poscli.study.gates`)."]
    lines.append(
        f"{len(failed)} of {evaluated} evaluated runs did not pass their gate; they are in no claim and no ranking "
        "of this file (the table over seeds keeps them, counted in its `not_learned` column):\n"
    )
    return lines + [f"- did not learn: {gate.run}, {gate.reason}." for gate in sorted(failed, key=lambda g: g.run)]


GATES_SUFFIX = "-gates"  # TABLE-gates.md: every run's gate, a line each


def every_gate_markdown(table: str, gates: dict[str, Gate]) -> str:
    """TABLE-gates.md: each run's gate with its reason, learned or not (one seed a group, where no table over
    seeds or published file says it, this is where a reader finds whether a run learned)."""
    lines = [
        f"# {table}: which runs learned",
        "",
        "Each run's gate (`poscli.study.gates`): the bound it was held to and where it stands.",
        "",
    ]
    for gate in sorted(gates.values(), key=lambda g: g.run):
        verdict = "not evaluated" if not gate.evaluated else "learned" if gate.learned else "did not learn"
        lines.append(f"- {verdict}: {gate.run}, {gate.reason}.")
    return "\n".join(lines) + "\n"
