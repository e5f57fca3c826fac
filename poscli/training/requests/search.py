"""``poscli search-factors`` and ``poscli tune``'s requests: one field per option."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from poscli.training.requests import option, shared

SCORE_HELP = (
    "perplexity: the loss on windows of the training split; needle: the loss on the answer tokens of passkey "
    "prompts of the target length (LongRoPE2's needle-driven fitness, Shang et al., 2025)."
)


@dataclass(frozen=True)
class SearchRequest:
    """LongRoPE's factor search for one run at one target length."""

    target: int = option(..., "The length the factors are for, e.g. 2k.", metavar="LENGTH", parse="length")
    out: Path | None = option(
        None,
        "The factors JSON to write (default: RESULTS/searches/RUN-longrope-TARGET.json, with -needle before .json "
        "for --score needle); FILE.search.json keeps the state and trajectory.",
        metavar="FILE",
    )
    population: int = option(16, "Candidates per generation.", metavar="N")
    generations: int = option(10, "Generations.", metavar="N")
    parents: int = option(4, "Best candidates kept as parents each generation.", metavar="N")
    windows: int = option(
        2, "Windows of the target length from the training split that score a candidate.", metavar="N"
    )
    seed: int = option(0, "Seed of the windows and of the search.", metavar="N")
    score: str = option("perplexity", SCORE_HELP, metavar="perplexity|needle")
    device: str = shared("device")
    results: str | None = shared("results")
    quiet: bool = shared("quiet")


@dataclass(frozen=True)
class TuneRequest:
    """poscli tune: a method's options chosen for one run at one target length."""

    method: str = option(..., "The extension method whose options to choose.", metavar="METHOD")
    target: int = option(..., "The length to tune for, e.g. 2k.", metavar="LENGTH", parse="length")
    budget: int = option(12, "Candidates to evaluate at most (the defaults first).", metavar="N")
    score: str = option("perplexity", SCORE_HELP, metavar="perplexity|needle")
    windows: int = option(2, "Windows (or passkey prompts) that score a candidate.", metavar="N")
    grid: list[str] | None = option(
        None, "The values to try for an option (repeatable), instead of the method's.", metavar="KEY=V1,V2"
    )
    out: Path | None = option(
        None,
        "The options JSON to write (default: RESULTS/tuning/RUN-METHOD-TARGET.json); FILE.tune.json keeps the state "
        "and trajectory.",
        metavar="FILE",
    )
    seed: int = option(0, "Seed of the windows and of the candidates' order.", metavar="N")
    device: str = shared("device")
    results: str | None = shared("results")
    quiet: bool = shared("quiet")
