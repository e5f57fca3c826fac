"""LongRoPE's search for per-frequency rescale factors (Ding et al., 2024, section 3.2).

LongRoPE replaces one interpolation rule for every RoPE frequency with a factor per frequency,
lambda_i, inv_freq_i = base^(-2i/d) / lambda_i, found by an evolutionary search that minimises
perplexity at the target length. This is that search, sized for a small model on 2 CPU cores:

- fitness: mean loss (nats per token) of the unchanged weights on ``windows`` windows of the
  target length drawn (seeded) from the run's *training* split, so the search never sees the
  held-out text the evaluation scores;
- initial population: the per-frequency factors of PI (all s), NTK-aware and YaRN / NTK-by-parts
  (their inv_freq ratios to RoPE's), then mutations of those (the paper seeds with PI, NTK, YaRN);
- each generation keeps the best ``parents`` and fills the population with children made by
  uniform crossover of two parents and a log-normal mutation of some factors;
- constraints of the paper's search space: 1 <= lambda_i <= 1.25 s, non-decreasing in i (a lower
  frequency is interpolated at least as much as a higher one).

The paper also searches a number of leading dimensions left unscaled and a start-token window
(n-hat); neither is searched here. The state (population, scores, the best so far and the
trajectory of each generation) is written after every generation, so an interrupted search
resumes where it stopped and the trajectory is kept. The result is the JSON that ``poscli extend
--method longrope --factors FILE`` reads: {"long_factor": [...], "short_factor": [1, ...]}.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from poscli import encodings
from poscli.config import ModelConfig, TrainConfig
from poscli.core.device import select_device
from poscli.core.io import atomic_write
from poscli.data.corpus import CorpusOptions, load_corpus
from poscli.data.passkey import training_sequence
from poscli.data.tokenizer import run_tokenizer
from poscli.encodings.rope import RopeOptions
from poscli.errors import PoscliError
from poscli.extension import methods, scaling
from poscli.model import runs
from poscli.model.gpt import GPT
from poscli.training.options import check_positive, check_score


@dataclass(frozen=True)
class SearchSettings:
    run: str
    target: int
    population: int = 16
    generations: int = 10
    parents: int = 4
    windows: int = 2
    mutation: float = 0.3  # probability that a factor mutates
    sigma: float = 0.25  # standard deviation of the log-normal mutation
    seed: int = 0
    score: str = "perplexity"  # or "needle": the loss on passkey answers only (LongRoPE2's fitness)

    def check(self) -> None:
        check_positive(self, "population", "generations", "parents", "windows")
        if self.parents > self.population:
            raise PoscliError(f"--parents {self.parents} is more than the --population {self.population}")
        check_score(self.score)


def seed_factors(head_dim: int, base: float, factor: float, original_length: int) -> list[np.ndarray]:
    """PI, NTK-aware and YaRN (NTK-by-parts) as per-frequency factors lambda_i = RoPE's inv_freq_i /
    the method's. (d/2,) float64 each."""
    plain = scaling.default_inv_freq(head_dim, base).double()
    seeds = []
    for method in ("pi", "ntk", "ntk-by-parts"):
        inv_freq, _ = methods.rope_parameters(method, head_dim, base, factor, original_length)
        seeds.append((plain / inv_freq.double()).numpy())
    return seeds


def constrain(factors: np.ndarray, factor: float) -> np.ndarray:
    """The paper's search space: each factor in [1, 1.25 s], non-decreasing over the frequencies."""
    return np.maximum.accumulate(np.clip(factors, 1.0, 1.25 * factor))


class Fitness:
    """Mean loss of a run's weights with given long factors, on fixed windows of its training text."""

    def __init__(
        self, folder: Path, target: int, windows: int, seed: int, device: torch.device, score: str = "perplexity"
    ):
        config = runs.read_config(folder)
        model = config["model"]
        if methods.get("longrope").applies_to(encodings.get(model["pe"])) is not None:
            raise PoscliError(
                f"run {config['name']!r} uses --pe {model['pe']}, which does not take --method longrope; search on a "
                "--pe rope run"
            )
        if config.get("extension") or model.get("rope_scaling"):
            raise PoscliError(
                f"run {config['name']!r} is already extended; search on its parent {config.get('parent')!r}"
            )
        self.model_config = ModelConfig.from_dict(model)
        self.original_length = self.model_config.train_length
        if target <= self.original_length:
            raise PoscliError(f"--target {target} is not longer than the run's train length {self.original_length}")
        options = RopeOptions(
            **{k: v for k, v in self.model_config.pe_options.items() if k in RopeOptions.__dataclass_fields__}
        )
        self.rotary_dim, self.base = options.rotary_dim(self.model_config.head_dim), options.base
        self.batch, self.scored_from = tuning_split(folder, config, target, windows, seed, device, score)
        self.weights = runs.load_weights(folder)
        self.target, self.device = target, device

    @torch.inference_mode()
    def __call__(self, long_factor: np.ndarray) -> float:
        rescaled = {
            "method": "longrope",
            "factor": self.target / self.original_length,
            "original_length": self.original_length,
            "options": {
                "long_factor": tuple(float(f) for f in long_factor),
                "short_factor": (),
                "attention_factor": 0.0,
            },
        }
        model = GPT(ModelConfig.from_dict({**self.model_config.to_dict(), "rope_scaling": rescaled}))
        model.load_state_dict(self.weights, strict=False)
        model.to(self.device).eval()
        return split_loss(model, self.batch, self.scored_from)


def training_windows(folder: Path, config: dict, target: int, windows: int, seed: int, device) -> torch.Tensor:
    """``windows`` windows of ``target + 1`` tokens drawn (seeded) from the run's *training* split, so a
    search never sees the held-out text the evaluation scores. -> (windows, target + 1) int64."""
    train = TrainConfig.from_dict(config["train"])
    corpus = load_corpus(train.data, train.heldout_fraction, CorpusOptions.of(train)).tokenized(
        run_tokenizer(train.tokenizer, folder)
    )
    tokens = corpus.train_tokens()
    if len(tokens) < target + 1:
        raise PoscliError(f"the run's training text has {len(tokens):,} tokens, fewer than one window of {target + 1}")
    starts = np.random.default_rng(seed).integers(0, len(tokens) - target, size=windows)
    read = (
        (lambda s: tokens.read(int(s), target + 1))
        if hasattr(tokens, "read")
        else (lambda s: tokens[s : s + target + 1])
    )
    return torch.from_numpy(np.stack([np.asarray(read(s), dtype=np.int64) for s in starts])).to(device)


def needle_prompts(folder: Path, config: dict, target: int, count: int, seed: int, device):
    """``count`` passkey prompts of ``target + 1`` tokens in the run's tokenizer, each ending in its
    answer, and the input position whose prediction is the answer's first token. -> (count, target + 1),
    [count] (LongRoPE2's needle-driven perplexity scores only those answer tokens)."""
    import random

    tokenizer = run_tokenizer(TrainConfig.from_dict(config["train"]).tokenizer, folder)
    rng = random.Random(seed + 7919)  # not the evaluation's passkey seeds
    rows, starts = [], []
    for _ in range(count):
        tokens, answer = training_sequence(target + 1, rng, tokenizer=tokenizer)
        rows.append(np.asarray(tokens, dtype=np.int64))
        starts.append(answer - 1)
    return torch.from_numpy(np.stack(rows)).to(device), starts


def tuning_split(folder: Path, config: dict, target: int, count: int, seed: int, device, score: str):
    """What a search scores a candidate on: training-split windows (``perplexity``, every token) or
    passkey prompts (``needle``, the answer tokens). -> (count, target + 1), the first scored input
    position of each row."""
    if score == "needle":
        return needle_prompts(folder, config, target, count, seed, device)
    return training_windows(folder, config, target, count, seed, device), [0] * count


def split_loss(model, batch: torch.Tensor, scored_from: list[int]) -> float:
    """Mean over rows of the mean loss (nats per token) of the targets from each row's first scored position."""
    losses = []
    for row, start in zip(batch, scored_from):
        logits = model(row[None, :-1])[0, start:].float()  # (n, V)
        losses.append(float(torch.nn.functional.cross_entropy(logits, row[1 + start :])))
    return sum(losses) / len(losses)


def search_factors(settings: SearchSettings, out: Path, results=None, device: str = "auto", progress=None) -> dict:
    """Run (or resume) the search; writes ``out`` (the factors JSON) and ``out``.search.json (the
    state and trajectory) after every generation. Returns the state."""
    settings.check()
    folder = runs.find_run(settings.run, results)
    state_path = out.with_name(out.name + ".search.json")
    fitness = Fitness(folder, settings.target, settings.windows, settings.seed, select_device(device), settings.score)
    factor = settings.target / fitness.original_length
    state = _load_state(state_path, settings)
    rng = np.random.default_rng([settings.seed, state["generation"]])
    if state["generation"] == 0:
        seeds = seed_factors(fitness.rotary_dim, fitness.base, factor, fitness.original_length)
        population = [constrain(s, factor) for s in seeds]
        while len(population) < settings.population:
            population.append(_mutate(population[len(population) % len(seeds)], rng, settings, factor))
        state["population"] = [p.tolist() for p in population[: settings.population]]
        state["scores"] = [None] * settings.population
    task = (
        progress.add_task(
            f"LongRoPE search {settings.run} to {settings.target}",
            total=settings.generations * settings.population,
            completed=state["generation"] * settings.population,
        )
        if progress
        else None
    )
    while state["generation"] < settings.generations:
        population = [np.array(p) for p in state["population"]]
        scores = [fitness(p) if s is None else s for p, s in zip(population, state["scores"])]
        if progress:
            progress.advance(task, settings.population)
        order = np.argsort(scores)
        best = int(order[0])
        if state["best"] is None or scores[best] < state["best"]["loss"]:
            state["best"] = {
                "loss": float(scores[best]),
                "long_factor": population[best].tolist(),
                "generation": state["generation"],
            }
        state["trajectory"].append(
            {
                "generation": state["generation"],
                "best_loss": float(scores[best]),
                "mean_loss": float(np.mean(scores)),
                "best_so_far": state["best"]["loss"],
                "evaluated": len(population),
            }
        )
        rng = np.random.default_rng([settings.seed, state["generation"] + 1])
        parents = [population[i] for i in order[: settings.parents]]
        children = [p.copy() for p in parents]  # elitism: the parents stay, with their scores
        child_scores = [scores[i] for i in order[: settings.parents]]
        while len(children) < settings.population:
            a, b = rng.choice(len(parents), size=2, replace=len(parents) < 2)
            mix = np.where(rng.random(len(parents[a])) < 0.5, parents[a], parents[b])
            children.append(_mutate(mix, rng, settings, factor))
            child_scores.append(None)
        state["generation"] += 1
        state["population"], state["scores"] = [c.tolist() for c in children], child_scores
        _save(state_path, out, state, len(population[0]))
    return state


def _mutate(factors: np.ndarray, rng: np.random.Generator, settings: SearchSettings, factor: float) -> np.ndarray:
    changed = rng.random(len(factors)) < settings.mutation
    return constrain(factors * np.exp(np.where(changed, rng.normal(0.0, settings.sigma, len(factors)), 0.0)), factor)


def _load_state(path: Path, settings: SearchSettings) -> dict:
    if path.exists():
        state = json.loads(path.read_text())
        same = lambda values: {k: v for k, v in values.items() if k != "generations"}  # noqa: E731, more generations continue it
        if same({"score": "perplexity", **state.get("settings", {})}) != same(asdict(settings)):  # older: perplexity
            raise PoscliError(
                f"{path} holds a search with other settings ({state.get('settings')}); remove it or give another --out"
            )
        state["settings"] = asdict(settings)
        return state
    return {
        "settings": asdict(settings),
        "generation": 0,
        "population": [],
        "scores": [],
        "best": None,
        "trajectory": [],
    }


def _save(state_path: Path, out: Path, state: dict, half: int) -> None:
    state_path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(state_path) as handle:
        json.dump(state, handle, indent=1)
    with atomic_write(out) as handle:
        json.dump({"long_factor": state["best"]["long_factor"], "short_factor": [1.0] * half}, handle, indent=1)


def perplexity_of(state: dict) -> float:
    """The best search perplexity (on training-split windows), for messages."""
    return math.exp(state["best"]["loss"])
