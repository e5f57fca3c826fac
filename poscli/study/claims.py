"""Claims declared in a recipe before its runs, each decided by its own tests (issue 62).

A verdict is decided once, by a rule fixed before the data:

- **Declared.** A recipe's ``[[claims]]`` name the groups compared, what against (another group,
  the group's own truncation null, or the base it was extended from), the lengths, the direction
  and the minimum effect, with the paper the claim comes from. A claim that names a group, a table,
  a task or a length the recipe does not have is a one-line error at ``--dry-run``. The published
  file records the commit that first declared each claim; a claim whose test (not its wording)
  changed since then is marked exploratory.
- **Its own family.** The claim's tests (one per length) are corrected together by Holm's (1979)
  step-down procedure and nothing else: a verdict never depends on which unrelated runs share a
  table. Everything not declared is an exploratory screen (``poscli.study.paired.Decisions``),
  corrected by Benjamini and Hochberg (1995) over the file.
- **Pairing only where it is physical.** A model against itself (its null, its base at the same
  length on the same spans) or two methods extended from the same base: a paired t-test over the
  seeds both have. Two different models share no seed (seed 0 of ALiBi and seed 0 of T5 bias are
  not a pair): Welch's (1947) unpaired t-test on per-seed values over the same spans.
- **Runs that learned.** Only runs that passed their gate (``poscli.study.gates``) count; a claim
  with fewer than ``MIN_SEEDS`` learned seeds on a side is "not tested", never "equal".
- **Words from the test.** "less"/"greater": holds where the Holm-adjusted p is under ALPHA and the
  effect is at least the minimum in the claimed direction; the opposite where the same holds the
  other way. "no-worse": the test of the effect against the margin (a ratio of 1 + the minimum
  effect, Schuirmann's non-inferiority reading of the 95% interval); holds where the adjusted p is
  under ALPHA and the effect is below the margin, fails where it is above. Anything else is "not
  separated at N seeds (ratio r [lo, hi])", which is not "no difference".

Values: per seed, the mean loss (nats per token) over the table's spans for perplexity, so a
difference is a log perplexity ratio and is shown as the ratio; exact match over a band of sizes
(``generalization.band_values``) for an algorithmic task; passkey accuracy pooled over depths.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import NoReturn

from poscli.core.lengths import parse_length
from poscli.errors import PoscliError
from poscli.evaluation.stats import ALPHA, holm, t_quantile, t_sf, welch_contrast

NULL, BASE = "null", "base"  # against: the group's own truncation null; the base an extension was made from
DIRECTIONS = ("less", "greater", "no-worse")
KINDS = ("perplexity", "passkey", "algorithmic")  # the tables a claim can be decided on
MIN_SEEDS = 3  # learned seeds each side needs before a claim is tested
TOO_FEW_SEEDS = "too few learned seeds"  # the reasons a test was not run (Test.untested)
UNSCORED = "not scored on the same spans at this length"
MIN_EFFECT = {"perplexity": 0.01, "accuracy": 0.05}  # 1% of perplexity; 5 points of accuracy
SCREEN_NOTE = (
    "Everything below is exploratory: the comparisons no claim declared, each test corrected by Benjamini and "
    "Hochberg (1995) over this file's screen, over the runs that learned. Its words (orders, keeps, agrees, in the "
    "claimed direction) describe the screen and are not verdicts; a verdict is a declared claim's, above."
)
TEST_FIELDS = ("table", "compare", "against", "lengths", "direction", "min_effect", "task", "sizes")  # a test
SIZE = "{size}"  # in a claim's groups: decided at each rung of the recipe's [sizes] on its own


@dataclass(frozen=True)
class Claim:
    """One declared claim: ``compare``'s value is ``direction`` than ``against``'s at each length."""

    name: str
    says: str  # the sentence, as its source says it
    source: str  # the paper, with the place in it
    table: str
    compare: str  # a group of runs (the run name with its seed replaced by *)
    against: str  # another group, NULL or BASE
    lengths: tuple[str, ...]  # "4x" (of the base's train length; of the largest training size for a task), "2k"
    direction: str  # "less", "greater", "no-worse" (of the metric: perplexity, or accuracy)
    min_effect: float | None = None  # None: MIN_EFFECT of the metric
    task: str = ""  # an algorithmic table's task
    sizes: tuple[str, ...] = ()  # two rungs: the claim is that the effect changes from the first to the second
    size: str = ""  # the rung this copy of a {size} claim is decided at (not a key: set by the expansion)

    def test_key(self) -> tuple:
        return tuple((name, getattr(self, name)) for name in TEST_FIELDS)

    def at(self, rung: str) -> Claim:
        """The claim's groups at one rung of the recipe's sizes."""
        return replace(self, compare=self.compare.replace(SIZE, rung), against=self.against.replace(SIZE, rung),
                       size=rung)  # fmt: skip


KEYS = {f.name for f in fields(Claim)} - {"size"}  # a [[claims]] table's keys


@dataclass(frozen=True)
class Test:
    """One test of a claim at one length: the estimate with its 95% interval, raw and adjusted p."""

    length: str
    paired: bool
    seeds: tuple[int, ...]  # learned seeds of compare and against (paired: the pairs, twice); over sizes, at each
    estimate: float  # perplexity: the ratio; accuracy: the difference
    low: float
    high: float
    p: float
    adjusted: float = math.nan
    untested: str = ""  # why it was not run: TOO_FEW_SEEDS or UNSCORED
    note: str = ""  # the detail, e.g. "2 and 3 learned seeds, 3 a side needed"


@dataclass
class Verdict:
    claim: Claim
    metric: str
    tests: list[Test] = field(default_factory=list)
    declared: str = ""
    exploratory: str = ""  # why it is exploratory, if it is
    parameters: float = math.nan  # a claim at one size: the compared group's parameters

    def word(self, test: Test) -> str:
        """holds, the opposite (or fails), not separated, or not tested, decided by the claim's rule."""
        if test.untested:
            return "not tested"
        margin = self.margin()
        beyond = test.adjusted < ALPHA
        if self.claim.direction == "no-worse":
            if beyond:
                return "holds" if self._worse_by(test.estimate) < margin else "fails"
            return "not separated"
        lower = test.estimate < (1 if self.metric == "perplexity" else 0)
        effect = abs(test.estimate - 1) if self.metric == "perplexity" else abs(test.estimate)
        if not beyond or effect < self.min_effect():
            return "not separated"
        return "holds" if lower == (self.claim.direction == "less") else "the opposite holds"

    def margin(self) -> float:
        return self.min_effect() if self.metric == "accuracy" else math.log1p(self.min_effect())

    def min_effect(self) -> float:
        return self.claim.min_effect if self.claim.min_effect is not None else MIN_EFFECT[self.metric]

    def _worse_by(self, estimate: float) -> float:
        """How much worse ``compare`` is, in the margin's units (higher perplexity, lower accuracy)."""
        return math.log(estimate) if self.metric == "perplexity" else -estimate


# --------------------------------------------------------------------------- declaring


def parse_claims(entries: list, fail: Callable[..., NoReturn], tables: dict[str, dict]) -> list[Claim]:
    """The ``[[claims]]`` of a recipe, checked against what it runs. tables: table -> {"groups":
    its groups, "lengths": its lengths (ints, or None), "kind": perplexity / passkey / algorithmic,
    "tasks": its tasks, "train_length": group -> base train length, "target": group -> int,
    "parent": group -> the base's group}. ``fail(message, key, index)`` raises the one-line error."""
    claims, names = [], set()
    for index, entry in enumerate(entries):
        found = _claim_of(entry, index, fail, tables)
        if found[0].name in names:
            fail(f"claim {found[0].name!r} is declared twice; each claim needs its own name", "name", index)
        names.add(found[0].name)
        claims += found
    return claims


def _claim_of(entry, index: int, fail: Callable[..., NoReturn], tables: dict[str, dict]) -> list[Claim]:
    """The claim of one [[claims]], or one per rung where its groups hold {size}; a claim over
    ``sizes`` stays one, checked at both of its rungs."""
    if not isinstance(entry, dict):
        fail("each [[claims]] is a table of keys", "claims", index)
    for key in entry:
        if key not in KEYS:
            fail(f"[[claims]] has no key {key!r}; its keys: {', '.join(sorted(KEYS))}", key, index)
    for key in ("name", "says", "source", "compare", "against", "lengths", "direction"):
        if key not in entry:
            fail(f"every [[claims]] needs {key!r} (keys: {', '.join(sorted(KEYS))})", "claims", index)
    table = entry.get("table") or (next(iter(tables)) if len(tables) == 1 else "")
    if table not in tables:
        fail(f"claim table {table!r} is not one of this recipe's [[eval]] tables ({', '.join(tables)})", "table", index)
    info = tables[table]
    lengths = entry["lengths"]
    if isinstance(lengths, str):
        lengths = [lengths]
    if not isinstance(lengths, list) or not lengths or len(set(map(str, lengths))) != len(lengths):
        fail('lengths must be a list of distinct lengths, e.g. ["4x", "16x"] or ["1k"]', "lengths", index)
    min_effect = entry.get("min_effect")
    if min_effect is not None and (not isinstance(min_effect, (int, float)) or not 0 < min_effect < 1):
        fail(f"min_effect must be a number between 0 and 1, got {min_effect!r}", "min_effect", index)
    sizes = entry.get("sizes", [])
    if not isinstance(sizes, list) or (sizes and (len(sizes) != 2 or len(set(map(str, sizes))) != 2)):
        fail('sizes names two rungs of [sizes], the smaller first, e.g. sizes = ["s", "l"]', "sizes", index)
    made = claim_of_entry(entry)
    if made is None:  # a key missing or of the wrong type, which the checks above name
        fail("a claim needs name, says, source, compare, against, lengths and direction", "name", index)
    claim = replace(made, table=table)
    sized = SIZE in claim.compare or SIZE in claim.against
    if not sized:
        if sizes:
            fail(f'sizes needs groups that hold {SIZE}, e.g. compare = "ladder-alibi-{SIZE}-s*"', "sizes", index)
        _check_claim(claim, index, fail, info)
        return [claim]
    if not info.get("sizes"):
        fail(f"compare/against hold {SIZE} but table {table}'s runs have no size rungs ([sizes] and size in "
             "[[train]])", "compare", index)  # fmt: skip
    for rung in sizes:
        if rung not in info["sizes"]:
            fail(f"sizes: {rung!r} is not a rung of table {table} ({', '.join(info['sizes'])})", "sizes", index)
    for rung in sizes or info["sizes"]:
        _check_claim(claim.at(rung), index, fail, info)
    return [claim] if sizes else [claim.at(rung) for rung in info["sizes"]]


def claim_of_entry(entry) -> Claim | None:
    """A [[claims]] table as a Claim, unchecked (None where it lacks a key): for an older copy of a
    recipe, to tell whether a claim's test has changed since."""
    try:
        lengths = [entry["lengths"]] if isinstance(entry["lengths"], str) else entry["lengths"]
        min_effect = entry.get("min_effect")
        return Claim(str(entry["name"]), str(entry["says"]), str(entry["source"]), str(entry.get("table", "")),
                     str(entry["compare"]), str(entry["against"]), tuple(str(n) for n in lengths),
                     str(entry["direction"]), None if min_effect is None else float(min_effect),
                     str(entry.get("task", "")), tuple(str(n) for n in entry.get("sizes", [])))  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None


def _check_claim(claim: Claim, index: int, fail: Callable[..., NoReturn], info: dict) -> None:
    groups = info["groups"]
    if info["kind"] not in KINDS:
        fail(
            f"table {claim.table} is a {info['kind']} table; claims are about {', '.join(KINDS)} tables", "table", index
        )
    if claim.direction not in DIRECTIONS:
        fail(f"direction must be one of {', '.join(DIRECTIONS)}, got {claim.direction!r}", "direction", index)
    if claim.compare not in groups:
        fail(f"compare {claim.compare!r} is not a group of table {claim.table} ({', '.join(groups)})", "compare", index)
    if claim.against == BASE and claim.compare not in info["parent"]:
        fail(f"against = 'base' needs an extension; {claim.compare} is not one", "against", index)
    if claim.against not in (NULL, BASE) and claim.against not in groups:
        message = f"against {claim.against!r} is not 'null', 'base' or a group of table {claim.table}"
        fail(message + f" ({', '.join(groups)})", "against", index)
    if claim.against == claim.compare:
        fail("a claim compares a group with something else: against names the same group", "against", index)
    if claim.against == NULL and not info.get("null"):
        fail(f"against = 'null' needs null = true in table {claim.table}'s [[eval]]", "against", index)
    if info["kind"] == "algorithmic":
        if claim.task not in info["tasks"]:
            fail(f"task {claim.task!r} is not one of table {claim.table}'s ({', '.join(info['tasks'])})", "task", index)
    elif claim.task:
        fail(f"task is for an algorithmic table; {claim.table} is a {info['kind']} table", "task", index)
    resolved: dict[int, str] = {}
    for text in claim.lengths:
        try:
            length = resolve_length(claim, text, info)
        except ValueError as error:
            fail(str(error), "lengths", index)
        if info["lengths"] is not None and length not in info["lengths"]:
            shown = ", ".join(str(n) for n in sorted(info["lengths"]))
            fail(f"length {text} ({length}) is not evaluated in table {claim.table} ({shown})", "lengths", index)
        if length in resolved:  # one hypothesis, tested once in its family
            fail(
                f"lengths {resolved[length]} and {text} are the same length ({length}): name it once", "lengths", index
            )
        resolved[length] = text


def resolve_length(claim: Claim, text: str, info: dict) -> int:
    """A claim's length as the table holds it: "4x" of the compared group's (base's) train length,
    or for an algorithmic table the factor itself (its band up to 4x the largest training size);
    "target": an extension's target; else a length ("2k")."""
    if text.endswith("x") and text[:-1].isdigit():
        factor = int(text[:-1])
        if info["kind"] == "algorithmic":
            if factor not in (2, 4):
                raise ValueError(f"length {text}: an algorithmic claim is at 2x or 4x its largest training size")
            return factor
        return factor * info["train_length"][claim.compare]
    if info["kind"] == "algorithmic":
        raise ValueError(f"length {text}: an algorithmic claim is at 2x or 4x its largest training size")
    if text == "target":
        if claim.compare not in info["target"]:
            raise ValueError(f"length 'target' needs an extension; {claim.compare} is not one")
        return info["target"][claim.compare]
    try:
        return parse_length(text, "lengths")
    except PoscliError:
        raise ValueError(
            f"length {text!r}: give a multiple of the train length (4x), 'target' or a length (2k)"
        ) from None


def describe(claim: Claim, info: dict) -> str:
    """The claim as ``--dry-run`` lists it: what is compared, how it is tested, and how many runs
    each side has planned."""
    against = {NULL: "its own truncation null", BASE: "its base"}.get(claim.against, claim.against)
    task = f" on {claim.task}" if claim.task else ""
    lengths = ", ".join(claim.lengths)
    if claim.sizes:
        small, large = (claim.at(rung) for rung in claim.sizes)
        kind = "paired differences" if is_paired(small, info) else "four groups"
        planned = " and ".join(str(info["runs"].get(one.compare, 0)) for one in (large, small))
        return (f"{claim.name}: the ratio of {claim.compare} to {against}{task} at {claim.sizes[1]} "
                f"{claim.direction} than at {claim.sizes[0]}, at {lengths} (Welch contrast of {kind}, Holm over its "
                f"{len(claim.lengths)}; {planned} runs planned) [{claim.source}]")  # fmt: skip
    test = "paired t-test" if is_paired(claim, info) else "Welch's t-test"
    planned = info["runs"].get(claim.compare, 0)
    other = planned if claim.against in (NULL, BASE) else info["runs"].get(claim.against, 0)
    return (f"{claim.name}: {claim.compare} {claim.direction} than {against}{task} at {lengths} ({test}, Holm over "
            f"its {len(claim.lengths)}; {planned} and {other} runs planned) [{claim.source}]")  # fmt: skip


def is_paired(claim: Claim, info: dict) -> bool:
    """A model against itself, or two methods extended from the same base: the only real pairs."""
    if claim.against in (NULL, BASE):
        return True
    parents = info["parent"]
    return claim.compare in parents and parents.get(claim.against) == parents[claim.compare]


# --------------------------------------------------------------------------- deciding


def decide(claim: Claim, info: dict, values) -> Verdict:
    """The claim's verdict from ``values(claim, length) -> (compare's, against's)``: two dicts seed
    key -> value over learned runs (None where the two were not scored on the same spans)."""
    metric = "perplexity" if info["kind"] == "perplexity" else "accuracy"
    verdict = Verdict(claim, metric, parameters=info.get("parameters", {}).get(claim.compare, math.nan))
    paired = is_paired(claim.at(claim.sizes[0]) if claim.sizes else claim, info)
    tests = []
    for text in claim.lengths:
        if claim.sizes:  # the effect at the second rung against the first
            small, large = (claim.at(rung) for rung in claim.sizes)
            pairs = [values(one, resolve_length(one, text, info)) for one in (large, small)]
            tests.append(_test(text, paired, pairs, verdict))
        else:
            tests.append(_test(text, paired, [values(claim, resolve_length(claim, text, info))], verdict))
    adjusted = holm([math.nan if t.untested else t.p for t in tests])
    verdict.tests = [t if t.untested else replace(t, adjusted=a) for t, a in zip(tests, adjusted)]
    return verdict


def _test(text: str, paired: bool, pairs: list, verdict: Verdict) -> Test:
    """One length's test. One pair (compare's values, against's): paired over shared seeds, or
    Welch's. Two (a claim over sizes: the larger rung's, then the smaller's): the change of the
    effect between them, a Welch contrast of the two rungs' paired differences or of four groups.
    For a no-worse claim its p is of the margin (the effect equal to it), else of no difference."""
    import numpy as np

    nan = math.nan
    if any(pair is None for pair in pairs):
        return Test(text, paired, (0, 0), nan, nan, nan, nan, untested=UNSCORED)
    if paired:  # a model against itself: its per-seed differences, one group a rung
        groups = []
        for mine, theirs in pairs:
            shared = sorted(set(mine) & set(theirs))
            groups.append(np.array([mine[s] - theirs[s] for s in shared]))
        weights = [1.0] if len(groups) == 1 else [1.0, -1.0]
    else:
        groups = [np.array(list(side.values())) for pair in pairs for side in pair]
        weights = [1.0, -1.0] if len(groups) == 2 else [1.0, -1.0, -1.0, 1.0]
    sizes = [len(group) for group in groups]
    seeds = (sizes[0], sizes[0]) if paired and len(sizes) == 1 else tuple(sizes)
    if min(sizes) < MIN_SEEDS:
        counts = " and ".join(map(str, sizes))
        note = f"{counts} learned seeds paired, {MIN_SEEDS} needed" if paired else \
            f"{counts} learned seeds, {MIN_SEEDS} a side needed"  # fmt: skip
        return Test(text, paired, seeds, nan, nan, nan, nan, untested=TOO_FEW_SEEDS, note=note)
    mean, low, high, p, df = welch_contrast(groups, weights)
    if verdict.claim.direction == "no-worse":
        worse = mean if verdict.metric == "perplexity" else -mean  # higher perplexity, lower accuracy
        se = (high - low) / (2 * t_quantile(df)) if math.isfinite(df) else 0.0
        gap = worse - verdict.margin()
        p = (0.0 if gap else 1.0) if se == 0 else min(1.0, 2 * t_sf(abs(gap) / se, df))
    scale = math.exp if verdict.metric == "perplexity" else float
    return Test(text, paired, seeds, scale(mean), scale(low), scale(high), p)


# --------------------------------------------------------------------------- writing


def claim_lines(verdict: Verdict) -> list[str]:
    """The claim's sentence and one line per length, every word from its test."""
    claim = verdict.claim
    words = [verdict.word(t) for t in verdict.tests]
    summary = _summary(words, [t.length for t in verdict.tests])
    task = f" on {claim.task}" if claim.task else ""
    declared = f" Declared {verdict.declared}." if verdict.declared else ""
    exploratory = f" **Exploratory**: {verdict.exploratory}." if verdict.exploratory else ""
    size = f" at size {claim.size} ({verdict.parameters / 1e6:.2f}M parameters)" if claim.size else ""
    over = f" (from size {claim.sizes[0]} to {claim.sizes[1]})" if claim.sizes else ""
    head = (f"- claim **{claim.name}**{size}{task}: {claim.says} ({claim.source}){over}. Here: {summary}.{declared}"
            f"{exploratory}")  # fmt: skip
    return [head, *(f"  - {_test_text(verdict, t, w)}" for t, w in zip(verdict.tests, words))]


def _summary(words: list[str], lengths: list[str]) -> str:
    by_word: dict[str, list[str]] = {}
    for word, length in zip(words, lengths):
        by_word.setdefault(word, []).append(length)
    order = ("holds", "the opposite holds", "fails", "not separated", "not tested")
    return "; ".join(f"{word} at {', '.join(by_word[word])}" for word in order if word in by_word)


def _test_text(verdict: Verdict, test: Test, word: str) -> str:
    if test.untested:
        return f"{test.length}: not tested ({test.note or test.untested})."
    name = "ratio" if verdict.metric == "perplexity" else "difference"
    if verdict.claim.sizes:
        large, small = verdict.claim.sizes[1], verdict.claim.sizes[0]
        name = f"{name} at {large} over at {small}" if name == "ratio" else f"{name} at {large} minus at {small}"
    value = f"{name} {test.estimate:.3f} [{test.low:.3f}, {test.high:.3f}]"
    if verdict.claim.sizes:
        at_large, at_small = (test.seeds[:1], test.seeds[1:]) if test.paired else (test.seeds[:2], test.seeds[2:])
        kind = "paired seeds" if test.paired else "seeds"
        seeds = f"{' and '.join(map(str, at_large))} {kind} at {large}, {' and '.join(map(str, at_small))} at {small}"
        p = f"Welch contrast, Holm p {test.adjusted:.3g}"
    else:
        seeds = f"{test.seeds[0]} paired seeds" if test.paired else f"{test.seeds[0]} and {test.seeds[1]} seeds"
        p = f"{'paired t' if test.paired else 'Welch'}, Holm p {test.adjusted:.3g}"
    if word == "not separated":
        return f"{test.length}: not separated at {seeds} ({value}; {p})."
    return f"{test.length}: {word}, {value}, {p}, {seeds}."


def claims_markdown(verdicts: list[Verdict]) -> list[str]:
    if not verdicts:
        return []
    lines = [
        "### Declared claims\n",
        "Each claim was declared in the recipe before it was decided, with its source; its tests (one per length) are "
        f"its family, Holm-corrected inside it (family-wise {ALPHA:.0%}). A model against itself (its truncation null, "
        "its base) or methods extended from one base: paired t-test over the seeds both have; different models: "
        f"Welch's t-test on per-seed values over the same spans. Only runs that learned count, and a side needs "
        f"{MIN_SEEDS} learned seeds. Perplexity: the ratio of geometric means with its 95% interval; accuracy: the "
        'difference. A difference under the claim\'s minimum effect is not claimed; "not separated" is not "no '
        'difference".\n',
    ]
    for verdict in verdicts:
        lines += claim_lines(verdict)
    return lines


# --------------------------------------------------------------------------- when a claim was declared


def declaration(recipe_path: Path, claim: Claim, parse) -> tuple[str, str]:
    """(when the claim was declared, why it is exploratory or ""): the first commit whose copy of the
    recipe holds a claim of this name, and whether its test differs now. ``parse(text)`` -> the
    recipe's claims by name as that commit held them (None where that copy no longer parses)."""
    path = Path(recipe_path).resolve()
    if _git(path.parent, "rev-parse", "--is-inside-work-tree") != "true":
        return "outside a git checkout (no record of when)", ""
    found = _git(path.parent, "log", "--reverse", "--format=%h %cs", "-S", f'"{claim.name}"', "--", path.name)
    if not found:
        return "in this working tree (not yet committed)", ""
    commit, day = found.splitlines()[0].split()
    text = _git(path.parent, "show", f"{commit}:./{path.name}")
    first = parse(text) if text is not None else None
    when = f"in {commit} ({day})"
    declared = first.get(claim.name) if first is not None else None
    if declared is not None and claim.size:  # a {size} claim was declared once for every rung
        declared = declared.at(claim.size)
    if declared is not None and declared.test_key() != claim.test_key():
        return when, f"its test changed after it was declared in {commit}"
    return when, ""


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
