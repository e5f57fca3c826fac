"""``--task multiquery``: RULER's multi-query needle (Hsieh et al., 2024, niah_multiquery): K keys
under K names hidden in the filler, and the model is asked for every one of them.

The prompt is the compact passkey format (``poscli.data.passkey``) with K key sentences, each at a
depth drawn from ``--depths``, then the K questions in a random order, each in the format a
passkey-trained model knows, ``What is the <name> pass key? The <name> pass key is <key>. ``. As
in multi-query recall (``associative-recall``), the questions are given and the keys are the
model's to write: scoring is teacher-forced over the whole context (one forward pass), and a query
is *recalled* when each digit of its key and the stop after it are the argmax given the true text
before them. Each query counts at its key's depth, so a (length, depth) cell holds as many queries
as the prompts put there (the count varies; the heatmap shows it), and a prompt is *exact* when
all its K queries are recalled (the row with depth ``all``). ``length`` is the whole context,
questions and keys included. ``--keys K`` sets K (default 4, RULER's), ``--trials`` the prompts
per length; the prompts are the same for every run (seeded by length and K). The effective length
(RULER) comes from the recall pooled over depths. Byte-level runs only.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from poscli.data.passkey import MAX_KEY, NAMES, TEMPLATES, Needle, make_prompt
from poscli.errors import PoscliError
from poscli.evaluation.tasks import register
from poscli.evaluation.tasks.base import Task, lengths_done

DEFAULT_QUERIES = 4  # RULER's niah_multiquery asks for 4 keys
ALL_DEPTHS = -1.0  # the depth of the rows that count whole prompts (exact: every query recalled)
QUESTION = TEMPLATES["compact"].question  # "What is the {name} pass key? The {name} pass key is "
KEY_SENTENCE = TEMPLATES["compact"].key_sentence
COLUMNS = ["run", "label", "pe", "train_length", "task", "keys", "length", "depth", "trials", "correct", "accuracy",
           "ci_low", "ci_high", "note"]  # fmt: skip


def multiquery_prompt(length: int, keys: int, depths: list[float], rng: random.Random):
    """A context of exactly ``length`` bytes: a prompt with ``keys`` named keys, each at a depth
    drawn from ``depths``, then every key asked for in a random order. -> (prompt, answer, mask,
    depths): the prompt (no question), the questions with their keys (``answer``), which of the
    answer's tokens are scored ((A,) bool: each key's digits and its stop), and the depth of each
    query's key, in question order."""
    names = rng.sample(NAMES, keys)
    needles = [Needle(name, rng.randint(1, MAX_KEY), rng.choice(depths)) for name in names]
    queried = rng.sample(needles, keys)
    answer, mask = "", []
    for needle in queried:
        question, key = QUESTION.format(name=needle.name), f"{needle.key}. "
        answer += question + key
        mask += [False] * len(question) + [True] * (len(key) - 1) + [False]  # the digits and the stop
    sentences = sum(len(KEY_SENTENCE.format(name=n.name, key=n.key)) for n in needles)
    if length - len(answer) < sentences:
        raise PoscliError(
            f"a multi-query context with {keys} keys needs at least {sentences + len(answer)} tokens; got length "
            f"{length}; use longer --lengths or fewer --keys"
        )
    prompt = make_prompt(length - len(answer), needles, "compact", asked=False)
    return prompt, answer, np.array(mask), [needle.depth for needle in queried]


def recalled(model, prompt: str, answer: str, mask: np.ndarray, device) -> np.ndarray:
    """Teacher-forced: per query, whether each of its scored tokens (digits, stop) is the argmax
    given the true text before it. -> (K,) bool."""
    import torch

    from poscli.data.tokens import encode

    tokens = torch.from_numpy(encode(prompt + answer).astype(np.int64))[None]  # (1, P + A)
    with torch.inference_mode():
        best = model(tokens.to(device))[0, len(prompt) - 1 : -1].argmax(-1).cpu().numpy()  # (A,)
    hits = best == encode(answer)  # (A,)
    starts = mask & ~np.r_[False, mask[:-1]]  # (A,): where each run of scored tokens begins
    groups = np.cumsum(starts) - 1  # (A,): the query each scored token belongs to
    return np.array([hits[mask & (groups == query)].all() for query in range(int(groups[mask].max()) + 1)])


@register("multiquery")
class MultiQuery(Task):
    summary = "RULER's multi-query needle: K named keys, every one asked for; recall by depth and length"
    citation = "Hsieh et al., 2024"
    default_table = "multiquery"
    reads = ("depths", "trials", "keys")
    scored = "each query's key"  # what one query is, in the table's and the figure's words

    def check(self, options: dict[str, Any]) -> None:
        from poscli.evaluation.retrieval import parse_depths

        parse_depths(options["depths"])
        keys, trials = DEFAULT_QUERIES if options["keys"] is None else options["keys"], options["trials"]
        if not 1 <= keys <= len(NAMES) or trials < 1:
            flag, given = ("--trials", trials) if trials < 1 else ("--keys", keys)
            raise PoscliError(f"--task {self.name} takes --keys 1 to {len(NAMES)}, --trials from 1; got {flag} {given}")

    def evaluate(self, run_names: list[str], options: dict[str, Any], results, progress, table: str):
        from poscli.core.device import select_device
        from poscli.evaluation.retrieval import parse_depths
        from poscli.model import runs

        self.check(options)
        keys = DEFAULT_QUERIES if options["keys"] is None else options["keys"]
        trials, depths = options["trials"], parse_depths(options["depths"])
        device = select_device(options["device"])
        rows = []
        for name in run_names:
            model, config = self.load_byte_run(name, results, device)
            lengths = options["lengths"] or [config["model"]["train_length"], 4 * config["model"]["train_length"]]
            bar = progress.add_task(f"{self.name} {name}", total=len(lengths)) if progress else None
            for length in lengths:
                lead = {"run": config["name"], "label": runs.run_label(config), "pe": config["model"]["pe"],
                        "train_length": config["model"]["train_length"], "task": self.name, "keys": keys,
                        "length": length}  # fmt: skip
                rows += [lead | cell for cell in self.cells(model, length, keys, depths, trials, device)]
                if progress:
                    progress.advance(bar)
        return rows

    def context(self, length: int, keys: int, depths: list[float], rng: random.Random):
        """One prompt of the task: (prompt, answer, mask, depths), as ``multiquery_prompt`` makes them."""
        return multiquery_prompt(length, keys, depths, rng)

    def cells(self, model, length: int, keys: int, depths: list[float], trials: int, device) -> list[dict]:
        """One length: a row per depth (queries whose key sat there) and one for whole prompts
        (depth ALL_DEPTHS), each with its Wilson interval; n/a where the run has no positions that
        far (a learned table)."""
        from poscli.errors import NotApplicable
        from poscli.evaluation.stats import wilson_interval

        rng = random.Random(f"{self.name}-{keys}-{length}")
        prompts = [self.context(length, keys, depths, rng) for _ in range(trials)]
        try:
            scored = [recalled(model, prompt, answer, mask, device) for prompt, answer, mask, _ in prompts]
        except NotApplicable as reason:
            nan = float("nan")
            return [{"depth": depth, "trials": 0, "correct": 0, "accuracy": nan, "ci_low": nan, "ci_high": nan,
                     "note": f"n/a: {reason}"} for depth in [*depths, ALL_DEPTHS]]  # fmt: skip
        at_depth = np.concatenate([placed for *_, placed in prompts])  # (trials * K,)
        hits = np.concatenate(scored)  # (trials * K,)
        counts = [(depth, hits[at_depth == depth]) for depth in depths]
        counts.append((ALL_DEPTHS, np.array([s.all() for s in scored])))
        rows = []
        for depth, outcome in counts:
            correct, n = int(outcome.sum()), len(outcome)
            low, high = wilson_interval(correct, n) if n else (float("nan"), float("nan"))
            accuracy = correct / n if n else float("nan")
            rows.append({"depth": depth, "trials": n, "correct": correct, "accuracy": accuracy, "ci_low": low,
                         "ci_high": high, "note": ""})  # fmt: skip
        return rows

    def write(self, result, options: dict[str, Any], results, table: str):
        key = ["run", "keys", "length", "depth"]
        return self.write_rows(result, results, table, COLUMNS, key, lambda t: multiquery_markdown(t, self))

    def owns(self, data) -> bool:
        return {"task", "keys", "depth", "correct"} <= set(data.columns) and (data["task"] == self.name).all()

    def evaluated(self, rows, run: str, options: dict[str, Any]) -> bool:
        keys = DEFAULT_QUERIES if options.get("keys") is None else options["keys"]
        return lengths_done(rows[(rows["run"] == run) & (rows["keys"] == keys)], options)

    def seed_summary(self, rows, groups, options: dict[str, Any], folder: Path, table: str, min_runs: int):
        return None, ""  # one table per run; a summary over seeds is not written yet

    def plots(self, data, folder: Path, table: str) -> list[Path]:
        """One heatmap per run and K: recall by depth (y) and length (x), each cell with its count."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from poscli.evaluation.retrieval import run_effective_lengths

        written = []
        by_depth = data[data["depth"] != ALL_DEPTHS]
        for (run, keys), part in by_depth.groupby(["run", "keys"]):
            recall = part.pivot_table(index="depth", columns="length", values="accuracy").sort_index(ascending=False)
            count = part.pivot_table(index="depth", columns="length", values="trials").reindex_like(recall)
            figure, axis = plt.subplots(figsize=(1.4 + 1.1 * recall.shape[1], 1.2 + 0.45 * recall.shape[0]))
            image = axis.imshow(recall.to_numpy(float), vmin=0, vmax=1, cmap="viridis", aspect="auto")
            for (y, x), value in np.ndenumerate(recall.to_numpy(float)):
                label = "n/a" if value != value else f"{value:.2f}"
                axis.text(x, y, f"{label}\nn={int(count.iloc[y, x])}", ha="center", va="center", fontsize=8)
            axis.set_xticks(range(recall.shape[1]), [str(c) for c in recall.columns])
            axis.set_yticks(range(recall.shape[0]), [f"{d:g}%" for d in recall.index])
            effective = run_effective_lengths(part.assign(run=run))[run]
            axis.set(xlabel="context length (tokens)", ylabel="key depth")
            title = f"{self.name}: {run}, {int(keys)} keys\neffective length {effective} (RULER, >= 0.85)"
            axis.set_title(title, fontsize=9)
            figure.colorbar(image, ax=axis, label="recall (teacher forced)")
            path = Path(folder) / f"{table}-{run}-{int(keys)}keys.png"
            figure.savefig(path, dpi=120, bbox_inches="tight")
            plt.close(figure)
            written.append(path)
        return written


def multiquery_markdown(table, task: MultiQuery) -> str:
    """Per run, K and length: recall pooled over depths [95% Wilson], whole prompts exact, the
    effective length; then recall by depth with each cell's count."""
    from poscli.evaluation.retrieval import EFFECTIVE_THRESHOLD, run_effective_lengths
    from poscli.evaluation.stats import wilson_interval

    by_depth = table[table["depth"] != ALL_DEPTHS]
    whole = table[table["depth"] == ALL_DEPTHS].set_index(["run", "keys", "length"])
    rows = by_depth.assign(row=by_depth["run"] + "/" + by_depth["keys"].astype(str))
    effective = run_effective_lengths(rows.assign(run=rows["row"]))
    lengths = sorted(table["length"].unique())
    lines = [f"Recall (`--task {task.name}`): {task.scored} recalled (teacher forced), pooled over "
             f"depths [95% Wilson]; in brackets after it, the prompts with every key recalled. Effective length: the "
             f"longest length up to which recall stays at or above {EFFECTIVE_THRESHOLD} (RULER).", "",
             "| run | keys | effective length | " + " | ".join(map(str, lengths)) + " |",
             "|---|---|---|" + "---|" * len(lengths)]  # fmt: skip
    for (run, keys), part in rows.groupby(["run", "keys"], sort=True):
        cells = []
        for length in lengths:
            cell = part[(part["length"] == length) & part["accuracy"].notna()]
            if cell.empty:
                cells.append("n/a" if (part["length"] == length).any() else "")
                continue
            correct, n = int(cell["correct"].sum()), int(cell["trials"].sum())
            low, high = wilson_interval(correct, n)
            prompts = whole.loc[(run, keys, length)]
            cells.append(f"{correct / n:.2f} [{low:.2f}, {high:.2f}] (exact {int(prompts['correct'])}/"
                         f"{int(prompts['trials'])})")  # fmt: skip
        lines.append(f"| {run} | {keys} | {effective[f'{run}/{keys}']} | " + " | ".join(cells) + " |")
    depths = sorted(by_depth["depth"].unique())
    lines += ["", "Recall by the key's depth (percent of the filler), with the queries counted there:", "",
              "| run | keys | length | " + " | ".join(f"{d:g}%" for d in depths) + " |",
              "|---|---|---|" + "---|" * len(depths)]  # fmt: skip
    for (run, keys, length), part in by_depth.groupby(["run", "keys", "length"], sort=True):
        at = part.set_index("depth")
        cells = [_depth_cell(at.loc[depth]) for depth in depths]
        lines.append(f"| {run} | {keys} | {length} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _depth_cell(row) -> str:
    return "n/a" if row["accuracy"] != row["accuracy"] else f"{row['accuracy']:.2f} (n={int(row['trials'])})"
