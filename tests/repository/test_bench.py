"""The benchmark suite writes every table it promises. Correctness only: no test asserts a time."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from benchmarks import bench
from poscli import encodings
from poscli.config import ModelConfig
from poscli.model.gpt import GPT

# A stand-in with nanoGPT's interface (GPTConfig fields; GPT(config)(idx, targets) -> (logits, loss)),
# so the adapter is tested without nanoGPT's code in this repository.
FAKE_NANOGPT = """
from dataclasses import dataclass
import torch
from torch import nn
from torch.nn import functional as F

@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True

class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size)
        print("number of parameters: ...")

    def forward(self, idx, targets=None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        logits = self.head(x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
"""


@pytest.mark.slow
def test_quick_bench_writes_every_table_with_every_encoding(tmp_path):
    checkout = tmp_path / "nanoGPT"
    checkout.mkdir()
    (checkout / "model.py").write_text(FAKE_NANOGPT)
    out = tmp_path / "bench"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench", "--quick", "--out", str(out), "--nanogpt", str(checkout)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    names = set(encodings.names()) | set(bench.USER_DEFINED)  # a user-defined encoding too
    matmul = pd.read_csv(out / "matmul.csv")
    assert set(matmul["dtype"]) == {"fp32", "bf16"} and (matmul["gflops"] > 0).all()
    with_kernel = set(matmul.loc[matmul["gflops"] >= bench.MIN_DTYPE_GFLOPS, "dtype"]) | {
        "fp32"
    }  # bf16 rows only where it has one
    train = pd.read_csv(out / "train.csv")
    assert set(train["encoding"]) == names | {"nanoGPT (learned)"}
    assert set(train["dtype"]) == with_kernel
    assert (train["tokens_per_s"] > 0).all() and (train["mfu"] > 0).all()
    assert (train.loc[train["encoding"] == "none", "ratio_to_none"] == 1.0).all()

    evals = pd.read_csv(out / "eval.csv")
    assert set(evals["encoding"]) == names | set(bench.REMAPPED), (
        "every encoding, learned and user-defined included, and every remapping"
    )
    assert set(evals["length"]) == {64}
    assert (evals["peak_rss_gib"] >= evals["baseline_rss_gib"]).all()

    startup = pd.read_csv(out / "startup.csv")
    assert len(startup) == 3 and (startup["seconds"] > 0).all()
    targets = pd.read_csv(out / "targets.csv")
    assert targets["target"].str.contains("nanoGPT").any() and targets["target"].str.contains("bf16").any() == (
        "bf16" in with_kernel
    )
    assert json.loads((out / "machine.json").read_text())["torch"] == torch.__version__
    report = (out / "BENCH.md").read_text()
    assert "## Training with --compile against eager" in report  # not measured by --quick: a compile takes ~40 s
    for heading in (
        "Targets",
        "Matrix-multiply peak",
        "Training throughput",
        "Evaluating one window",
        "Start-up",
        "Time to quality",
    ):
        assert f"## {heading}" in report
    from benchmarks.quality import RECIPES, THRESHOLDS

    quality = pd.read_csv(out / "quality.csv")
    assert len(quality) == len(RECIPES) * len(THRESHOLDS) and set(quality["recipe"]) == set(RECIPES)
    reached = quality.dropna(subset=["minutes"])
    assert (reached["minutes"] <= reached["budget_minutes"]).all() and (reached["steps"] % 10 == 0).all()
    for _recipe, part in quality.groupby("recipe"):  # the stricter threshold is never reached first
        loose, strict = (part[part["threshold"] == t].iloc[0] for t in THRESHOLDS)
        assert np.isnan(strict["minutes"]) or loose["minutes"] <= strict["minutes"]

    # --only-eval --encodings re-measures those rows of eval.csv, with the rows their ratios divide by
    # (none; rope for rope+rerope) in the same session, and keeps the rest, their ratios and the other tables
    before, old_rows = (out / "train.csv").read_text(), evals.set_index(["encoding", "length"])
    again = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench", "--quick", "--only-eval", "--encodings", "rope+rerope",
         "--out", str(out)],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert (out / "train.csv").read_text() == before and "--only-eval --encodings rope+rerope" in (
        out / "BENCH.md"
    ).read_text()
    merged = pd.read_csv(out / "eval.csv").set_index(["encoding", "length"])
    assert set(merged.index) == set(old_rows.index)
    sessions = merged["session"]
    assert sessions[("rope+rerope", 64)] == sessions[("rope", 64)] == sessions[("none", 64)] != sessions[("alibi", 64)]
    for column in ("seconds", "ratio_to_none"):  # kept, not re-measured, and not re-divided by the new none
        assert merged.loc[("alibi", 64), column] == old_rows.loc[("alibi", 64), column]
    assert merged.loc[("rope+rerope", 64), "ratio_to_plain"] == pytest.approx(
        merged.loc[("rope+rerope", 64), "seconds"] / merged.loc[("rope", 64), "seconds"], abs=1e-3
    )

    # --only-quality re-measures time to quality and keeps every other table
    kept = (out / "train.csv").read_text()
    quality_again = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench", "--quick", "--only-quality", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert quality_again.returncode == 0, quality_again.stderr[-3000:]
    assert (out / "train.csv").read_text() == kept and "--only-quality" in (out / "BENCH.md").read_text()

    # --only-train re-measures the matmul peak and training rows and keeps the evaluation table
    eval_before = (out / "eval.csv").read_text()
    trained = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench", "--quick", "--only-train", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert (out / "eval.csv").read_text() == eval_before and "--only-train" in (out / "BENCH.md").read_text()
    train = pd.read_csv(out / "train.csv")
    assert set(train["encoding"]) == names and (train.loc[train["encoding"] == "none", "ratio_to_none"] == 1.0).all()


def test_training_rates_are_taken_round_robin_and_ratios_paired():
    """Every model's repeat r runs before any model's repeat r + 1, so a machine that slows down
    between rounds slows every encoding alike; the ratio to none is taken within each round."""
    order = []

    class Recorder(torch.nn.Module):
        def __init__(self, name):
            super().__init__()
            self.name, self.weight = name, torch.nn.Parameter(torch.zeros(1))

        def loss(self, tokens, targets, positions=None, weights=None):
            order.append(self.name)
            return self.weight.sum() * 0 + tokens.float().mean() * 0

    plan = bench.Plan.quick()
    rates = bench.interleaved_tokens_per_second({"none": Recorder("none"), "t5": Recorder("t5")}, plan, "fp32")
    timed = order[2 * 2 :]  # after each model's two warm-up steps
    assert (
        timed
        == ["none"] * plan.train_steps
        + ["t5"] * plan.train_steps
        + ["none"] * plan.train_steps
        + ["t5"] * plan.train_steps
    )
    assert len(rates["none"]) == len(rates["t5"]) == plan.train_repeats


def test_flop_count_uses_exactly_the_model_matmul_weights():
    """The 6N term of MFU counts every weight that enters a matmul, once: the Linear weights and
    the tied embedding (which is also the output matrix), and nothing else."""
    config = ModelConfig(pe="none")
    model = GPT(config)
    matmul_weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    matmul_weights += model.token_embedding.weight.numel()
    attention = 6 * config.n_layer * config.train_length * config.d_model
    assert bench.training_flops_per_token(config) == 6 * matmul_weights + attention


def test_summary_is_the_median_and_the_relative_range():
    assert bench.summarise([3.0, 1.0, 2.0]) == (2.0, 1.0)


def test_a_dtype_without_a_matmul_kernel_is_skipped_in_one_line():
    """bf16 on a CPU without a bf16 kernel runs its matmul at about 1 GFLOP/s: its training rows would
    take hours, so make bench says so and measures fp32 only; fp32 is always measured."""
    lines = []
    assert bench.measured_dtypes({"fp32": 170.0, "bf16": 0.3}, lines.append) == ["fp32"]
    assert lines == ["train bf16: skipped, this machine's bf16 matmul runs at 0.3 GFLOP/s (no kernel)"]
    assert bench.measured_dtypes({"fp32": 0.5, "bf16": 160.0}, lines.append) == ["fp32", "bf16"]
    assert bench.matmul_peak("bf16", 2048)[0] > 0  # at 256 only where the kernel is missing: seconds, not minutes


def test_an_evaluation_over_the_time_cap_is_timed_once_and_stops_there(monkeypatch):
    """An encoding whose forward pass exceeds the cap (quadratic work) gets one timing at that length
    and none beyond; BENCH.md names it and where it stopped."""
    plan = bench.Plan(bench.Plan.quick().model, eval_lengths=(32, 64, 128), eval_repeats=3)
    monkeypatch.setattr(bench, "EVAL_SECONDS_CAP", 0.0)
    rows = bench.eval_child("cope", plan)
    assert [row["length"] for row in rows] == [32] and rows[0]["spread"] == 0
    monkeypatch.setattr(bench, "EVAL_SECONDS_CAP", 1e9)
    assert [row["length"] for row in bench.eval_child("cope", plan)] == [32, 64, 128]
    said = bench.stopped_early([*rows, {"encoding": "none", "length": 128}])
    assert "cope (to 32)" in said and "none" not in said


def test_nanogpt_baseline_is_its_shakespeare_char_recipe():
    """The time-to-quality baseline follows nanoGPT's train.py: get_lr's warmup over warmup + 1, the
    cosine from the end of warmup to min_lr at the last step, and AdamW with betas (0.9, 0.99) and
    weight decay on the matrices only."""
    from benchmarks.quality import NanoGPTRecipe

    recipe, steps = NanoGPTRecipe(), 2500
    assert recipe.rate(0, steps) == pytest.approx(1e-3 / 101)
    assert recipe.rate(99, steps) == pytest.approx(1e-3 * 100 / 101)
    assert recipe.rate(100, steps) == pytest.approx(1e-3)
    assert recipe.rate((100 + steps) // 2, steps) == pytest.approx((1e-3 + 1e-4) / 2)
    assert recipe.rate(steps, steps) == pytest.approx(1e-4)
    rates = [recipe.rate(step, steps) for step in range(100, steps + 1)]
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    optimizer = recipe.optimizer(model)
    decayed, plain = optimizer.param_groups
    assert {p.dim() for p in decayed["params"]} == {2} and decayed["weight_decay"] == 0.1
    assert {p.dim() for p in plain["params"]} == {1} and plain["weight_decay"] == 0.0
    assert optimizer.defaults["betas"] == (0.9, 0.99)
