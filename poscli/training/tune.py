"""``poscli tune``: choose an extension method's options for one run and one target length.

Users ask how to pick YaRN's beta_fast / beta_slow and attention factor, Self-Extend's group and
window, ReRoPE's window (the YaRN and LongLM issue trackers: LongLM 10, 28; yarn 13, 36). This is
the answer, measured on the run itself:

- the candidates: the product of the values the method declares for each option
  (``ExtensionMethod.search_space``, or ``--grid`` for the user's own), the method's defaults first;
  where the product exceeds ``--budget``, the defaults and a seeded random sample of the rest;
- each candidate is the run extended with those options and no fine-tuning (a candidate that
  fine-tunes would cost a training run each), scored on a *tuning split*: windows of the target
  length from the run's training text (``perplexity``: mean loss per token), or passkey prompts
  of the target length built from the run's tokenizer (``needle``: the loss on the answer tokens
  only, LongRoPE2's needle-driven perplexity, Shang et al., 2025). Neither is the held-out text
  ``poscli eval`` scores, so the evaluation of the tuned run is not the tuning's own score;
- the state (candidates, scores, the trajectory of the best so far) is written after every
  candidate, so an interrupted tuning resumes and a larger ``--budget`` continues it.

The result, ``{"method", "target", "options", ...}``, is what ``poscli extend --options-from FILE``
reads.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from poscli import encodings
from poscli.config import ModelConfig
from poscli.core.device import select_device
from poscli.core.io import atomic_write
from poscli.errors import PoscliError
from poscli.model import runs
from poscli.model.gpt import GPT
from poscli.training.extend import applicable_method
from poscli.training.factor_search import split_loss, tuning_split
from poscli.training.options import check_positive, check_score


@dataclass(frozen=True)
class TuneSettings:
    run: str
    method: str
    target: int
    budget: int = 12  # candidates evaluated at most
    score: str = "perplexity"
    windows: int = 2  # windows (perplexity) or prompts (needle) per candidate
    seed: int = 0
    grid: dict[str, list[float]] = field(default_factory=dict)  # overrides the method's own values

    def check(self) -> None:
        check_score(self.score)
        check_positive(self, "budget", "windows")


def search_space(method, original_length: int, target: int, settings: TuneSettings) -> dict[str, list[float]]:
    """The values tried for each option: the method's own (``ExtensionMethod.search_space``), ``--grid``'s
    in their place."""
    space = {**method.search_space(original_length, target), **settings.grid}
    if not space:
        raise PoscliError(
            f"--method {method.name} declares no options to tune; give --grid KEY=V1,V2 for one it takes "
            f"({', '.join(method.options) or 'none'})"
        )
    method.check_options({key: values[0] for key, values in space.items()})  # an unknown option fails now
    return space


def candidates(method, original_length: int, target: int, settings: TuneSettings) -> list[dict[str, float]]:
    """The options to try, the method's defaults ({}) first: the grid, or ``budget`` of it."""
    space = search_space(method, original_length, target, settings)
    grid = [dict(zip(space, values)) for values in itertools.product(*space.values())]
    random.Random(settings.seed).shuffle(grid)  # one order per seed: a larger budget extends a smaller one
    return [{}, *grid[: settings.budget - 1]]


class Scorer:
    """A candidate's score (lower is better) on the run's tuning split at the target length."""

    def __init__(self, folder: Path, settings: TuneSettings, device: torch.device):
        self.config = runs.read_config(folder)
        self.method = applicable_method(self.config, settings.method, settings.target)
        self.parent = ModelConfig.from_dict(self.config["model"])
        if settings.target <= self.parent.train_length:
            raise PoscliError(f"--target {settings.target} is not longer than the run's train length")
        self.encoding = encodings.get(self.parent.pe)
        self.weights = runs.load_weights(folder)
        self.space = search_space(self.method, self.parent.train_length, settings.target, settings)
        self.target, self.device = settings.target, device
        self.batch, self.scored_from = tuning_split(
            folder, self.config, self.target, settings.windows, settings.seed, device, settings.score
        )  # (N, target + 1), the first scored input position of each row

    @torch.inference_mode()
    def __call__(self, options: dict[str, float]) -> float:
        weights = dict(self.weights)
        checked = self.method.check_options(options)
        factor = self.target / self.parent.train_length
        changes = self.method.extended_config(self.encoding, self.parent, factor, self.target, checked, weights)
        model = GPT(ModelConfig.from_dict({**self.parent.to_dict(), **changes}))
        model.load_state_dict(weights)
        model.to(self.device).eval()
        return split_loss(model, self.batch, self.scored_from)


def tune(settings: TuneSettings, out: Path, results=None, device: str = "auto", progress=None) -> dict:
    """Run (or resume) the tuning; writes ``out`` (the chosen options) and ``out``.tune.json (the
    state and trajectory) after every candidate. Returns the state."""
    settings.check()
    folder = runs.find_run(settings.run, results)
    scorer = Scorer(folder, settings, select_device(device))
    state_path = out.with_name(out.name + ".tune.json")
    state = _load_state(state_path, settings)
    if not state["candidates"] or len(state["candidates"]) < settings.budget:
        known = {json.dumps(c, sort_keys=True): s for c, s in zip(state["candidates"], state["scores"])}
        fresh = candidates(scorer.method, scorer.parent.train_length, settings.target, settings)
        state["candidates"] = fresh
        state["scores"] = [known.get(json.dumps(c, sort_keys=True)) for c in fresh]
    task = progress.add_task(f"tune {settings.method} on {settings.run} at {settings.target}",
                             total=len(state["candidates"])) if progress else None  # fmt: skip
    for index, options in enumerate(state["candidates"]):
        if state["scores"][index] is None:
            try:
                state["scores"][index] = scorer(options)
            except PoscliError as error:  # options the method refuses here (e.g. a window too long): never chosen
                state["scores"][index] = math.inf
                state.setdefault("refused", {})[str(index)] = str(error)
            best = min((s, i) for i, s in enumerate(state["scores"]) if s is not None)
            state["trajectory"].append(
                {"candidate": index, "options": options, "loss": state["scores"][index], "best_so_far": best[0]}
            )
            _save(state_path, out, state, settings, scorer)
        if progress:
            progress.advance(task)
    _save(state_path, out, state, settings, scorer)
    return state


def best_of(state: dict) -> tuple[dict[str, float], float]:
    """The best candidate's options and loss."""
    score, index = min((s, i) for i, s in enumerate(state["scores"]) if s is not None)
    return state["candidates"][index], score


def at_edge(options: dict[str, float], space: dict[str, list[float]]) -> dict[str, str]:
    """The options whose chosen value is the smallest or the largest the grid tried ({option:
    "smallest" | "largest"}): the best may lie beyond it, and a wider ``--grid`` would say. Only
    options tried at three values or more: between two (YaRN's temperature on or off) every choice
    is an end. The defaults ({}) are not a grid point and are never at an edge."""
    edges = {}
    for key, value in options.items():
        values = sorted(set(space.get(key, [])))
        if len(values) > 2 and value in (values[0], values[-1]):
            edges[key] = "smallest" if value == values[0] else "largest"
    return edges


def _load_state(path: Path, settings: TuneSettings) -> dict:
    if path.exists():
        state = json.loads(path.read_text())
        same = lambda values: {k: v for k, v in values.items() if k != "budget"}  # noqa: E731, a larger budget continues it
        if same(state.get("settings", {})) != same(asdict(settings)):
            raise PoscliError(
                f"{path} holds a tuning with other settings ({state.get('settings')}); remove it or give another --out"
            )
        state["settings"] = asdict(settings)
        return state
    return {"settings": asdict(settings), "candidates": [], "scores": [], "trajectory": []}


def _save(state_path: Path, out: Path, state: dict, settings: TuneSettings, scorer: Scorer) -> None:
    state_path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(state_path) as handle:
        json.dump(state, handle, indent=1)
    options, loss = best_of(state)
    defaults = state["scores"][0]
    chosen = {
        "run": settings.run,
        "method": settings.method,
        "target": settings.target,
        "options": scorer.method.check_options(options),
        "score": settings.score,
        "loss": loss,
        "perplexity": math.exp(loss),
        "defaults_loss": defaults,
        "evaluated": sum(s is not None for s in state["scores"]),
        "at_edge": at_edge(options, scorer.space),
    }
    with atomic_write(out) as handle:
        json.dump(chosen, handle, indent=1)


def read_options(path: Path, method: str | None) -> tuple[str, dict[str, float]]:
    """``poscli extend --options-from FILE``: the method and options ``poscli tune`` wrote."""
    try:
        chosen = json.loads(Path(path).read_text())
        written, options = chosen["method"], dict(chosen["options"])
    except FileNotFoundError:
        raise PoscliError(f"--options-from {path}: no such file; write one with poscli tune RUN --method M") from None
    except (ValueError, KeyError, TypeError):
        raise PoscliError(f"--options-from {path} is not a file poscli tune wrote (method and options)") from None
    if method is not None and method != written:
        raise PoscliError(f"--options-from {path} holds options for --method {written}, not {method}")
    return written, options
