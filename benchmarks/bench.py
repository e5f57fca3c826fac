"""The benchmark suite behind ``make bench``: speed and memory, measured, never asserted.

    python -m benchmarks.bench [--out results/reference/bench] [--nanogpt PATH] [--quick]

writes to ``--out``:

- ``machine.json``: CPU, cores, threads, torch / Python versions, poscli commit;
- ``matmul.csv``: the machine's measured matrix-multiply peak per dtype (GFLOP/s);
- ``train.csv``: training tokens/s per encoding and dtype at the default model, the ratio to
  ``none``, and model FLOP utilisation against the matmul peak of that dtype; with
  ``--nanogpt PATH`` (a checkout of github.com/karpathy/nanoGPT) its ``model.py`` is measured
  side by side at the same size;
- ``eval.csv``: seconds and peak resident memory to evaluate one window (forward pass and loss)
  of 4k, 16k, 32k and 64k tokens, per encoding, each encoding in a fresh process; ``--only-eval
  --encodings A,B`` re-measures those rows with the rows their ratios divide by (``none``, a
  remapping's plain encoding) and keeps the others with their ratios, so each ratio is of two rows
  of one ``session`` (a column: when the row was measured);
- ``startup.csv``: ``poscli --help``, an argument error, and a second ``poscli train`` on the
  same corpus, from launch to its first optimizer step;
- ``quality.csv``: time to quality (``benchmarks.quality``): the minutes the default-size model needs to
  reach 0.75x and 0.6x the 3-gram's perplexity at 128 tokens with poscli's recipe and nanoGPT's;
- ``BENCH.md``: all of the above as tables, with each of issue 5's targets marked met or not.

Every number is the median of several repeats; ``spread`` is (max - min) / median.
``--quick`` runs a tiny model at short lengths, its eval rows in one process, and no compiled training (the
test suite uses it to check the tables, not the numbers; inductor's compile alone would take it ~40 s).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import torch

from poscli import encodings
from poscli.config import ModelConfig, TrainConfig
from poscli.core.io import write_json, write_text
from poscli.core.provenance import git_commit
from poscli.model.gpt import GPT
from poscli.training.optim import make_optimizer
from poscli.training.train import training_step

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass
class Plan:
    """What one benchmark run measures; ``quick`` shrinks everything for the tests."""

    model: ModelConfig
    batch_size: int = 16
    train_steps: int = 8  # optimizer steps per timed repeat
    train_repeats: int = 5  # taken round-robin over the encodings (interleaved_tokens_per_second)
    eval_lengths: tuple[int, ...] = (4096, 16384, 32768, 65536)
    eval_repeats: int = 3
    matmul_size: int = 2048
    startup_repeats: int = 3
    compiled: tuple[str, ...] = ("none", "rope", "alibi")  # measured compiled against eager (issue 19)
    small_corpus: bool = False  # the start-up rows train on quick_corpus(), not the built-in corpus

    @classmethod
    def quick(cls) -> Plan:
        model = ModelConfig(n_layer=2, n_head=4, d_model=32, train_length=32, attention_block=16)
        return cls(
            model,
            batch_size=2,
            train_steps=2,
            train_repeats=2,
            eval_lengths=(64,),
            eval_repeats=1,
            matmul_size=64,
            startup_repeats=1,
            compiled=(),  # a compile takes the suite ~40 s of a 2-core CPU: make bench measures it
            small_corpus=True,  # building the built-in corpus' cache would take the suite ~10 s more
        )


def summarise(values: list[float]) -> tuple[float, float]:
    """(median, spread), spread = (max - min) / median."""
    median = statistics.median(values)
    return median, (max(values) - min(values)) / median if median else 0.0


# --- the machine ------------------------------------------------------------------------------


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "poscli_commit": git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def matmul_peak(dtype: str, size: int, repeats: int = 5) -> list[float]:
    """GFLOP/s of a square float matrix multiply, the ceiling MFU is measured against. A dtype
    without a kernel (bf16 on a CPU lacking one: 0 GFLOP/s, minutes per 2048 x 2048 product) is
    measured at 256 and reported at that rate, under MIN_DTYPE_GFLOPS, instead of at ``size``."""
    probe = torch.randn(256, 256).to(DTYPES[dtype])
    probe @ probe  # warm up
    start = time.perf_counter()
    probe @ probe
    probe_rate = 2 * 256**3 / (time.perf_counter() - start) / 1e9
    if probe_rate < MIN_DTYPE_GFLOPS:
        return [probe_rate]
    a, b = (torch.randn(size, size).to(DTYPES[dtype]) for _ in range(2))
    a @ b  # warm up: first call allocates and picks kernels
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        rates.append(2 * size**3 / (time.perf_counter() - start) / 1e9)
    return rates


# --- training throughput ----------------------------------------------------------------------


def training_flops_per_token(config: ModelConfig) -> float:
    """6 N for the matmul weights (N counts the tied output matrix once) plus 6 L T d for causal
    attention scores and values (Kaplan et al., 2020, table 1, halved for the causal mask)."""
    d, layers = config.d_model, config.n_layer
    matmul_weights = layers * (4 * d * d + 2 * config.mlp_ratio * d * d) + config.vocab_size * d
    return 6 * matmul_weights + 6 * layers * config.train_length * d


def timed_trainer(model: torch.nn.Module, plan: Plan, dtype: str):
    """Warm ``model`` up on ``training_step`` (the step ``poscli train`` runs) on random bytes and
    return a function that times one repeat of ``plan.train_steps`` steps -> tokens/s."""
    optimizer = make_optimizer(model, TrainConfig())
    generator = torch.Generator().manual_seed(0)
    length = plan.model.train_length

    def batch():
        data = torch.randint(0, 256, (plan.batch_size, length + 1), generator=generator)
        return data[:, :-1].contiguous(), data[:, 1:].contiguous()

    for _ in range(2):  # warm up
        training_step(model, optimizer, *batch(), grad_clip=1.0, dtype=dtype)

    def repeat() -> float:
        batches = [batch() for _ in range(plan.train_steps)]
        start = time.perf_counter()
        for tokens, targets in batches:
            training_step(model, optimizer, tokens, targets, grad_clip=1.0, dtype=dtype)
        return plan.train_steps * plan.batch_size * length / (time.perf_counter() - start)

    return repeat


def tokens_per_second(model: torch.nn.Module, plan: Plan, dtype: str) -> list[float]:
    """Median-ready tokens/s of ``training_step``, ``plan.train_repeats`` repeats."""
    repeat = timed_trainer(model, plan, dtype)
    return [repeat() for _ in range(plan.train_repeats)]


def interleaved_tokens_per_second(models: dict[str, torch.nn.Module], plan: Plan, dtype: str) -> dict[str, list[float]]:
    """Each model's tokens/s with the repeats taken round-robin (one repeat of every model, then the
    next), so a machine whose speed drifts during the run (a shared VM: spreads of 15-25% measured
    one encoding after another) slows every encoding alike and the ratios stay comparable."""
    trainers = {name: timed_trainer(model, plan, dtype) for name, model in models.items()}
    rates: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(plan.train_repeats):
        for name, repeat in trainers.items():
            rates[name].append(repeat())
    return rates


class NanoGPTAdapter(torch.nn.Module):
    """nanoGPT's GPT with poscli's ``loss(tokens, targets)``; its own forward computes the loss."""

    def __init__(self, checkout: Path, config: ModelConfig):
        super().__init__()
        spec = importlib.util.spec_from_file_location("nanogpt_model", checkout / "model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        nano_config = module.GPTConfig(
            block_size=config.train_length,
            vocab_size=config.vocab_size,
            n_layer=config.n_layer,
            n_head=config.n_head,
            n_embd=config.d_model,
            dropout=0.0,
        )
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter count
            self.gpt = module.GPT(nano_config)

    def loss(self, tokens, targets, positions=None, weights=None):  # positions: plain 0..T-1 only; no per-token weights
        assert weights is None, "nanoGPT's loss takes no per-token weights"
        return self.gpt(tokens, targets)[1]


# A dtype whose matrix multiply runs slower than this has no kernel on the machine (bf16 on a CPU
# without AVX-512 BF16 or AMX: 1.3 GFLOP/s at 256, 0.3 at 2048 on an AMD EPYC, against 180 for
# fp32): its training rows would take hours, and timing its 2048 product alone takes minutes.
MIN_DTYPE_GFLOPS = 5.0


def measured_dtypes(peaks: dict[str, float], log=print) -> list[str]:
    """fp32, and each other dtype whose measured matmul peak shows a kernel for it."""
    kept = [dtype for dtype in DTYPES if dtype == "fp32" or peaks.get(dtype, 0.0) >= MIN_DTYPE_GFLOPS]
    for dtype in DTYPES:
        if dtype not in kept:
            log(
                f"train {dtype}: skipped, this machine's {dtype} matmul runs at {peaks.get(dtype, 0.0):g} GFLOP/s (no "
                "kernel)"
            )
    return kept


def benchmark_training(plan: Plan, peaks: dict[str, float], nanogpt: Path | None, log) -> list[dict]:
    rows = []
    models = [(pe, lambda pe=pe: GPT(replace(plan.model, pe=pe))) for pe in (*encodings.names(), *user_defined())]
    if nanogpt is not None:
        models.append(("nanoGPT (learned)", lambda: NanoGPTAdapter(nanogpt, plan.model)))
    flops = training_flops_per_token(plan.model)
    for dtype in measured_dtypes(peaks, log):
        built = {}
        for name, build in models:
            torch.manual_seed(0)
            built[name] = build()
        measured = interleaved_tokens_per_second(built, plan, dtype)
        for name, rates in measured.items():
            median, spread = summarise(rates)
            # Paired: each round's rate over none's in the same round, so a machine that slows
            # between rounds moves both; the median of the rounds, and their range.
            ratios = [rate / none for rate, none in zip(rates, measured["none"])]
            ratio, _ = summarise(ratios)
            rows.append(
                {
                    "encoding": name,
                    "dtype": dtype,
                    "tokens_per_s": round(median),
                    "spread": round(spread, 3),
                    "mfu": round(median * flops / (peaks[dtype] * 1e9), 3),
                    "ratio_to_none": round(ratio, 3),
                    "ratio_range": f"{min(ratios):.2f}-{max(ratios):.2f}",
                }
            )
            log(
                f"train {name} {dtype}: {median:,.0f} tok/s (spread {spread:.1%}), {ratio:.3f}x none paired "
                f"({min(ratios):.2f}-{max(ratios):.2f})"
            )
    for row in rows:
        fp32 = next(r for r in rows if r["encoding"] == row["encoding"] and r["dtype"] == "fp32")
        row["ratio_to_fp32"] = round(row["tokens_per_s"] / fp32["tokens_per_s"], 3)
    return rows


def benchmark_compile(plan: Plan, log) -> list[dict]:
    """Training tokens/s with ``--compile`` against eager, fp32, the two measured side by side per
    encoding (the compile itself, in the warm-up steps, is not timed; its seconds are reported)."""
    from poscli.core.device import compile_model

    rows = []
    for pe in plan.compiled:
        rates = {}
        for mode in ("eager", "compiled"):
            torch.manual_seed(0)
            model = GPT(replace(plan.model, pe=pe))
            start = time.perf_counter()
            compiled = mode == "compiled" and compile_model(
                model, torch.device("cpu"), plan.model.train_length, report=log
            )
            tokens_per_second(model, plan, "fp32")  # warm-up, and the training graph's compile
            seconds = time.perf_counter() - start
            rates[mode] = summarise(tokens_per_second(model, plan, "fp32"))
            if mode == "compiled":
                rows.append(
                    {
                        "encoding": pe,
                        "eager_tokens_per_s": round(rates["eager"][0]),
                        "compiled_tokens_per_s": round(rates[mode][0]),
                        "ratio": round(rates[mode][0] / rates["eager"][0], 3),
                        "compiled": bool(compiled),
                        "compile_seconds": round(seconds, 1),
                        "spread": round(max(rates["eager"][1], rates[mode][1]), 3),
                    }
                )
        log(
            f"compile {pe}: {rows[-1]['ratio']}x eager ({rows[-1]['compiled_tokens_per_s']:,} against "
            f"{rows[-1]['eager_tokens_per_s']:,} tok/s)"
        )
    return rows


# --- evaluation time and memory ---------------------------------------------------------------


# A user-defined encoding (not in poscli/encodings/) that implements only bias_of_distance, so
# the table shows what the fast path gives an encoding nobody wrote a kernel for (issue 20).
USER_DEFINED = ("examples.power_penalty:PowerPenalty",)


def user_defined() -> tuple[str, ...]:
    """USER_DEFINED, with the checkout's root on sys.path so examples/ imports whatever the current
    folder; none outside a checkout (an installed poscli has no examples/)."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "examples" / "power_penalty.py").is_file():
        return ()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    importlib.import_module("examples.power_penalty")  # imported by the bench itself: poscli imports no code from
    return USER_DEFINED  # the current folder on a config's say-so (poscli.core.registry.import_user_module)


# Attention remappings measured as extensions (poscli.extension.remap): ENCODING+METHOD, each planned for the
# longest length it is measured at, at the lengths up to 32k (issue 18's bars: 16k time, 32k memory).
REMAPPED = ("rope+self-extend", "rope+rerope", "rope+leaky-rerope", "rope+sinks", "alibi+sinks", "rope+string",
            "rope+dca", "rope+lm-infinite", "rope+ms-poe")  # fmt: skip
REMAPPED_MAX_LENGTH = 32768


def eval_config(plan: Plan, pe: str) -> ModelConfig:
    # A learned table has one row per position; this is the table `poscli extend --method
    # interpolate --target N` makes, so the learned model is measured as a user would run it.
    from poscli import encodings
    from poscli.extension import methods

    if "+" in pe:  # ENCODING+METHOD: the remapping `poscli extend RUN --method METHOD --target N` stores
        pe, method = pe.split("+", 1)
        return replace(
            plan.model,
            pe=pe,
            remap=methods.plan_remap(method, plan.model.train_length, max(remapped_lengths(plan))).to_dict(),
        )
    config = replace(plan.model, pe=pe)
    return replace(config, **encodings.get(pe).grown_for_positions(config, max(plan.eval_lengths)))


def remapped_lengths(plan: Plan) -> tuple[int, ...]:
    return tuple(n for n in plan.eval_lengths if n <= REMAPPED_MAX_LENGTH) or plan.eval_lengths[:1]


def peak_memory_gib() -> float:
    """This process's peak resident memory. VmHWM belongs to the process image, so unlike
    ru_maxrss it does not inherit the parent's peak across fork and exec."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20  # kB -> GiB
    scale = 2**30 if sys.platform == "darwin" else 2**20  # ru_maxrss: bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


# A forward pass slower than this is timed once, and no longer length is measured: an encoding whose
# work grows as T^2 with no fused form (CoPE, stick-breaking: each pair's weight depends on the
# scores of the pairs between) would take hours at 64k. Its table then ends at the last length
# measured, and BENCH.md says where and why.
EVAL_SECONDS_CAP = 200.0


def eval_child(pe: str, plan: Plan) -> list[dict]:
    """Runs in its own process, so peak resident memory belongs to this encoding alone.

    Lengths go from short to long; the peak after each length is that length's peak.
    """
    torch.manual_seed(0)
    model = GPT(eval_config(plan, pe)).eval()
    baseline = peak_memory_gib()  # torch, the model and Python, before any evaluation
    rows = []
    with torch.no_grad():
        for length in remapped_lengths(plan) if "+" in pe else plan.eval_lengths:
            tokens = torch.randint(0, 256, (1, length + 1), generator=torch.Generator().manual_seed(length))
            seconds = []
            for _ in range(plan.eval_repeats):
                start = time.perf_counter()
                model.loss(tokens[:, :-1], tokens[:, 1:])
                seconds.append(time.perf_counter() - start)
                if seconds[-1] > EVAL_SECONDS_CAP:
                    break
            median, spread = summarise(seconds)
            peak = peak_memory_gib()
            rows.append(
                {
                    "encoding": pe,
                    "length": length,
                    "seconds": float(f"{median:.4g}"),  # 4 significant digits: a quick row's 0.3 ms is not 0
                    "spread": round(spread, 3),
                    "peak_rss_gib": round(peak, 3),
                    "baseline_rss_gib": round(baseline, 3),
                }
            )
            if seconds[0] > EVAL_SECONDS_CAP:  # longer lengths would take several times longer still
                break
    return rows


def benchmark_eval(
    plan_args: list[str], log, only: list[str] | None = None, kept: list[dict] | None = None
) -> list[dict]:
    """Each encoding (``only``: these) in a fresh process, so its peak memory is its own; with
    ``--quick`` (the tests, which check the tables, not the numbers) all of them in one process, whose
    peaks then accumulate. Every ratio is of two rows measured in the same session (the ``session``
    column): ``only`` is measured with NoPE's row and each remapping's plain encoding, and ``kept``
    rows (the other encodings, from an earlier run) keep the ratios they were measured with."""
    session = datetime.now(UTC).isoformat(timespec="seconds")
    names = with_reference_rows(only) if only else [*encodings.names(), *user_defined(), *REMAPPED]
    rows = [row for row in kept or [] if row["encoding"] not in names]
    measured = []
    for group in [names] if "--quick" in plan_args else [[pe] for pe in names]:
        which = ",".join(group)
        child = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench", "--eval-child", which, *plan_args],
            capture_output=True,
            text=True,
        )
        if child.returncode != 0:
            raise RuntimeError(f"eval benchmark for {which} failed:\n{child.stderr[-2000:]}")
        for row in json.loads(child.stdout.strip().splitlines()[-1]):
            measured.append({**row, "session": session})
            log(f"eval {row['encoding']} {row['length']}: {row['seconds']:.2f} s, peak {row['peak_rss_gib']:.2f} GiB")
    for row in measured:
        none = next(r for r in measured if r["encoding"] == "none" and r["length"] == row["length"])
        row["ratio_to_none"] = round(row["seconds"] / none["seconds"], 3)
        if "+" in row["encoding"]:  # a remapping against its own encoding, plain
            plain = next(
                r for r in measured if r["encoding"] == row["encoding"].split("+")[0] and r["length"] == row["length"]
            )
            row["ratio_to_plain"] = round(row["seconds"] / plain["seconds"], 3)
    return rows + measured


def with_reference_rows(only: list[str]) -> list[str]:
    """``only`` and the rows its ratios divide by: NoPE's, and each remapping's plain encoding."""
    references = ["none", *(name.split("+")[0] for name in only if "+" in name)]
    return [*only, *(name for name in dict.fromkeys(references) if name not in only)]


# --- start-up ---------------------------------------------------------------------------------


def seconds_of(command: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, env=env)
    return time.perf_counter() - start


def benchmark_startup(plan: Plan, log) -> list[dict]:
    poscli = [sys.executable, "-m", "poscli.cli.app"]
    env = {**os.environ, "POSCLI_DEBUG": ""}
    rows = []
    for what, command in [
        ("poscli --help", [*poscli, "--help"]),
        ("argument error (train --pe bogus)", [*poscli, "train", "--pe", "bogus"]),
    ]:
        median, spread = summarise([seconds_of(command, env) for _ in range(max(3, plan.startup_repeats))])
        rows.append({"what": what, "seconds": round(median, 3), "spread": round(spread, 3)})
    with tempfile.TemporaryDirectory() as results:
        m = plan.model
        train = [
            *poscli,
            "train",
            "--steps",
            "1",
            "--quiet",
            "--results",
            results,
            "--layers",
            str(m.n_layer),
            "--heads",
            str(m.n_head),
            "--width",
            str(m.d_model),
            "--train-length",
            str(m.train_length),
            "--data",
            quick_corpus() if plan.small_corpus else "stdlib",
        ]
        subprocess.run([*train, "--name", "first"], capture_output=True, env=env, check=True)  # fills the corpus cache
        waits = []
        for repeat in range(plan.startup_repeats):
            launched = time.time()
            subprocess.run([*train, "--name", f"again{repeat}"], capture_output=True, env=env, check=True)
            config = json.loads((Path(results) / "runs" / f"again{repeat}" / "config.json").read_text())
            waits.append(config["first_step_at"] - launched)
        median, spread = summarise(waits)
        rows.append(
            {"what": "second train: launch to first step", "seconds": round(median, 3), "spread": round(spread, 3)}
        )
    for row in rows:
        log(f"startup {row['what']}: {row['seconds']:.2f} s")
    return rows


# --- tables -----------------------------------------------------------------------------------


def write_csv(path: Path, rows: list[dict]) -> None:
    import pandas as pd

    write_text(path, pd.DataFrame(rows).to_csv(index=False))


def markdown(rows: list[dict], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


# The encodings of issue 33 and its aims: training at 0.7x NoPE or better, one forward at 32k under
# 1 GiB. The older encodings keep issue 5's floors (0.8x, RoPE 0.9x).
ISSUE_33_ENCODINGS = ("fox", "cope", "stick-breaking", "pope", "dpb", "scaled-sinusoidal", "hybrid")
ISSUE_34_REMAPPINGS = ("rope+string", "rope+dca", "rope+lm-infinite", "rope+ms-poe")
TRAIN_FLOORS = {"rope": 0.9, **dict.fromkeys(ISSUE_33_ENCODINGS, 0.7)}


def targets(
    train: list[dict], evals: list[dict], startup: list[dict], nanogpt: bool, compiled: list[dict] = ()
) -> list[dict]:
    """Issue 5's targets (and later issues'), each with the measured value and whether it is met."""
    out = []
    for row in compiled:  # issue 19 states the ratio and aims for 1.2x
        out.append(
            {
                "target": f"train {row['encoding']} --compile >= 1.2x eager (aim; fp32)",
                "measured": row["ratio"],
                "met": row["ratio"] >= 1.2,
            }
        )
    fp32 = [r for r in train if r["dtype"] == "fp32"]
    for row in fp32:
        if row["encoding"] in ("none",) or row["encoding"].startswith("nanoGPT"):
            continue
        floor = TRAIN_FLOORS.get(row["encoding"], 0.8)
        aim = " (issue 33's aim)" if row["encoding"] in ISSUE_33_ENCODINGS else ""
        out.append(
            {
                "target": f"train {row['encoding']} >= {floor}x none (fp32){aim}",
                "measured": row["ratio_to_none"],
                "met": row["ratio_to_none"] >= floor,
            }
        )
    if nanogpt:
        nano = next(r for r in fp32 if r["encoding"].startswith("nanoGPT"))
        for pe in ("none", "learned"):
            ours = next(r for r in fp32 if r["encoding"] == pe)
            ratio = round(ours["tokens_per_s"] / nano["tokens_per_s"], 3)
            out.append({"target": f"train {pe} >= nanoGPT (fp32)", "measured": ratio, "met": ratio >= 1.0})
    for row in train:
        if row["dtype"] == "bf16" and row["encoding"] == "none":
            out.append(
                {
                    "target": "bf16 >= 1.4x fp32 (none)",
                    "measured": row["ratio_to_fp32"],
                    "met": row["ratio_to_fp32"] >= 1.4,
                }
            )
    for row in evals:
        plain = "+" not in row["encoding"]
        if row["length"] == 65536 and plain:  # issue 20: every encoding, FIRE, KERPLE and user-defined included
            out.append(
                {
                    "target": f"eval {row['encoding']} at 64k peak RSS < 1 GiB",
                    "measured": row["peak_rss_gib"],
                    "met": row["peak_rss_gib"] < 1,
                }
            )
        elif row["length"] in (32768, 65536):
            out.append(
                {
                    "target": f"eval {row['encoding']} at {row['length']} peak RSS < 2 GiB",
                    "measured": row["peak_rss_gib"],
                    "met": row["peak_rss_gib"] < 2,
                }
            )
        if row["length"] == 32768 and row["encoding"] in ISSUE_33_ENCODINGS:
            out.append(
                {
                    "target": f"eval {row['encoding']} at 32k peak RSS < 1 GiB (issue 33's aim)",
                    "measured": row["peak_rss_gib"],
                    "met": row["peak_rss_gib"] < 1,
                }
            )
        if row["length"] == 32768 and plain and row["encoding"] != "none":
            out.append(
                {
                    "target": f"eval {row['encoding']} at 32k within 3x none",
                    "measured": row["ratio_to_none"],
                    "met": row["ratio_to_none"] <= 3,
                }
            )
        if row["length"] == 16384 and "+" in row["encoding"]:
            plain = row["encoding"].split("+")[0]
            out.append(
                {
                    "target": f"eval {row['encoding']} at 16k within 3x {plain}",
                    "measured": row["ratio_to_plain"],
                    "met": row["ratio_to_plain"] <= 3,
                }
            )
            if row["encoding"] in ISSUE_34_REMAPPINGS:
                out.append(
                    {
                        "target": f"eval {row['encoding']} at 16k within 1.5x {plain} (issue 34's aim)",
                        "measured": row["ratio_to_plain"],
                        "met": row["ratio_to_plain"] <= 1.5,
                    }
                )
        if row["length"] == 32768 and row["encoding"] in ISSUE_34_REMAPPINGS:
            out.append(
                {
                    "target": f"eval {row['encoding']} at 32k peak RSS < 1 GiB (issue 34's aim)",
                    "measured": row["peak_rss_gib"],
                    "met": row["peak_rss_gib"] < 1,
                }
            )
        if row["length"] == 32768 and row["encoding"] in ("alibi", "t5", "shaw"):
            out.append(
                {
                    "target": f"eval {row['encoding']} at 32k within 2x none",
                    "measured": row["ratio_to_none"],
                    "met": row["ratio_to_none"] <= 2,
                }
            )
    limits = {"poscli --help": 1.0, "argument error (train --pe bogus)": 1.0, "second train: launch to first step": 3.0}
    for row in startup:
        out.append(
            {
                "target": f"{row['what']} < {limits[row['what']]:g} s",
                "measured": row["seconds"],
                "met": row["seconds"] < limits[row["what"]],
            }
        )
    return out


TRAIN_COLUMNS = ["encoding", "dtype", "tokens_per_s", "spread", "ratio_to_none", "ratio_range", "ratio_to_fp32", "mfu"]
COMPILE_COLUMNS = [
    "encoding",
    "eager_tokens_per_s",
    "compiled_tokens_per_s",
    "ratio",
    "compiled",
    "compile_seconds",
    "spread",
]
EVAL_COLUMNS = [
    "encoding",
    "length",
    "seconds",
    "spread",
    "ratio_to_none",
    "ratio_to_plain",
    "peak_rss_gib",
    "baseline_rss_gib",
]
QUALITY_COLUMNS = [
    "recipe",
    "threshold",
    "minutes",
    "steps",
    "budget_steps",
    "budget_minutes",
    "final_ratio",
    "reference_ppl",
]
NOT_MEASURED = "Not measured in this run."


def write_report(
    out: Path,
    info: dict,
    matmul: list[dict],
    train: list[dict],
    evals: list[dict],
    startup: list[dict],
    checks: list[dict],
    command: str,
    compiled: list[dict] = (),
    quality: list[dict] = (),
) -> None:
    from benchmarks.quality import speedup_sentence

    met = sum(c["met"] for c in checks)
    missing = sorted(set(DTYPES) - {r["dtype"] for r in train})
    skipped = f"\nRows of {', '.join(missing)} skipped: no matmul kernel for that dtype on this machine"
    skipped += " (see the peak above).\n"
    skipped = skipped if missing else ""
    commit = info["poscli_commit"] or "uncommitted"
    text = f"""# poscli benchmarks

Produced by `{command}` on {info["date"]}: {info["cpu"]}, {info["cores"]} cores, torch {info["torch"]}
({info["torch_threads"]} threads, {info["cpu_capability"]}), Python {info["python"]},
poscli {commit}.
Each number is the median of several repeats; spread = (max - min) / median.

## Targets: {met} of {len(checks)} met

{markdown([{**c, "met": "yes" if c["met"] else "**no**"} for c in checks], ["target", "measured", "met"])}

## Matrix-multiply peak

{markdown(matmul, ["dtype", "size", "gflops", "spread"])}

## Training throughput (default model, batch {train[0].get("batch", "")}; MFU against the peak of the same dtype)

Repeats are taken round-robin over the encodings; x none is the median over repeats of each
repeat's rate over none's in the same round (paired), ratio_range their smallest and largest.
{skipped}
{markdown(train, TRAIN_COLUMNS)}

## Training with --compile against eager (fp32, side by side; compile seconds include the first steps)

{markdown(list(compiled), COMPILE_COLUMNS) if compiled else NOT_MEASURED}

## Evaluating one window (forward pass and loss, batch 1, fp32, each encoding in a fresh process)
{stopped_early(evals)}
The models are at initialisation. For CoPE and stick-breaking that sets how much of the T x T work
is done: their scans end early, exactly, once every row's gates over the nearer keys reach CoPE's
last position or have taken stick-breaking's whole stick (docs/design.md), and gates near 1/2 at
initialisation do so within the first 1024 keys. A trained model's gates decide how far its scan
goes (tools/gated_scan.py measures it on a trained run).

{markdown(evals, EVAL_COLUMNS)}

## Start-up

{markdown(startup, ["what", "seconds", "spread"])}

## Time to quality (default-size RoPE model at 128 tokens, stdlib; the two recipes side by side, benchmarks.quality)

poscli's recipe beside nanoGPT's AdamW recipe for this model size (its train_shakespeare_char
config: peak 1e-3, betas 0.9/0.99, warmup 100, cosine to 1e-4, weight decay 0.1), on the same model,
initial weights and batches. Training minutes (evaluation excluded) and steps until held-out
perplexity at 128 first falls to the threshold times the 3-gram's on the same tokens; nan: not within
the budget of steps.

{markdown(list(quality), QUALITY_COLUMNS) if quality else NOT_MEASURED}

{speedup_sentence(list(quality)) if quality else ""}
"""
    write_text(out / "BENCH.md", text)


def stopped_early(evals: list[dict]) -> str:
    """A sentence naming the encodings not measured at the longest length (one forward over the cap)."""
    longest = max((row["length"] for row in evals), default=0)
    reached = {}
    for row in evals:
        reached[row["encoding"]] = max(reached.get(row["encoding"], 0), row["length"])
    short = {pe: length for pe, length in reached.items() if length < longest and "+" not in pe}
    if not short:
        return ""
    named = ", ".join(f"{pe} (to {length})" for pe, length in sorted(short.items()))
    return (
        f"\nNot measured beyond the last length given: {named}. One forward pass there took over "
        f"{EVAL_SECONDS_CAP:.0f} s (timed once): their work grows as T^2 with no fused form.\n"
    )


def quick_corpus() -> str:
    """A folder of small synthetic documents for ``--quick`` (the tests): words from a fixed list."""
    import random

    folder = Path(tempfile.mkdtemp(prefix="poscli-bench-corpus-"))
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]
    for index in range(12):
        (folder / f"doc{index:02d}.txt").write_text(
            " ".join(rng.choice(words) for _ in range(300 + 60 * index)), encoding="utf-8"
        )
    return str(folder)


def benchmark_quality(quick: bool, log) -> list[dict]:
    """Time to quality, poscli's recipe against nanoGPT's (``benchmarks.quality``)."""
    from benchmarks.quality import QualityPlan, time_to_quality

    return time_to_quality(QualityPlan.quick(quick_corpus()) if quick else QualityPlan(), log)


def run(
    out: Path,
    plan: Plan,
    plan_args: list[str],
    nanogpt: Path | None,
    command: str,
    log=print,
    only_eval: bool = False,
    only: list[str] | None = None,
    only_compile: bool = False,
    only_train: bool = False,
    only_quality: bool = False,
) -> dict:
    """Every table; ``only_eval`` re-measures evaluation only (``only``: of these encodings, the
    other rows kept) and keeps the training, matmul and start-up tables of the last full run
    (BENCH.md says which command wrote it); ``only_compile`` re-measures the compiled training
    rows only and ``only_train`` the matmul peak and training rows only, keeping every other table."""
    out.mkdir(parents=True, exist_ok=True)
    info = machine()
    write_json(out / "machine.json", info)
    matmul = []
    import pandas as pd

    if only_quality:  # the time-to-quality rows alone; every other table as the last full run wrote it
        if not (out / "train.csv").exists():
            raise SystemExit(
                f"error: --only-quality updates the tables of a full run; {out} has none yet (run make bench)"
            )
        quality = benchmark_quality(plan.model.d_model < 64, log)
        write_csv(out / "quality.csv", quality)
        tables = {
            name: pd.read_csv(out / f"{name}.csv").to_dict("records") if (out / f"{name}.csv").exists() else []
            for name in ("matmul", "train", "eval", "startup", "compile", "targets")
        }
        write_report(
            out,
            info,
            tables["matmul"],
            tables["train"],
            tables["eval"],
            tables["startup"],
            tables["targets"],
            command,
            tables["compile"],
            quality,
        )
        return {**tables, "quality": quality}
    only_eval = only_eval or only_train  # both keep tables of the last full run
    if only_eval and not all(
        (out / name).exists()
        for name in ("train.csv", "startup.csv", "matmul.csv", "eval.csv")[: 4 if only_train else 3]
    ):
        raise SystemExit(
            f"error: --only-eval / --only-train update the tables of a full run; {out} has none yet (run make bench)"
        )
    for dtype in DTYPES if not only_eval or only_train else ():
        median, spread = summarise(matmul_peak(dtype, plan.matmul_size))
        size = (
            plan.matmul_size if median >= MIN_DTYPE_GFLOPS else min(256, plan.matmul_size)
        )  # no kernel: timed at 256 only
        matmul.append({"dtype": dtype, "size": size, "gflops": round(median, 1), "spread": round(spread, 3)})
        log(f"matmul {dtype}: {median:.0f} GFLOP/s")
    if matmul:
        write_csv(out / "matmul.csv", matmul)
    peaks = {row["dtype"]: row["gflops"] for row in matmul}
    if only_eval and not only_train:  # the other tables as the last full run wrote them
        train, startup = (pd.read_csv(out / name).to_dict("records") for name in ("train.csv", "startup.csv"))
        matmul = pd.read_csv(out / "matmul.csv").to_dict("records")
    else:
        train = benchmark_training(plan, peaks, nanogpt, log)
        for row in train:
            row["batch"] = plan.batch_size
        write_csv(out / "train.csv", train)
    kept = None
    if only_eval and (out / "eval.csv").exists():
        kept = pd.read_csv(out / "eval.csv").to_dict("records")  # with the ratios they were measured with
    if (only_compile or only_train) and kept is not None:  # the evaluation table as it is
        evals = pd.read_csv(out / "eval.csv").to_dict("records")
    else:
        evals = benchmark_eval(plan_args, log, only, kept)
        write_csv(out / "eval.csv", evals)
    if only_train:
        startup = pd.read_csv(out / "startup.csv").to_dict("records")
    elif not only_eval:
        startup = benchmark_startup(plan, log)
        write_csv(out / "startup.csv", startup)
    compiled = []
    if only_compile or not only_eval:
        compiled = benchmark_compile(plan, log)
        if compiled:  # --quick compiles nothing; an empty file would not read back
            write_csv(out / "compile.csv", compiled)
    elif (out / "compile.csv").exists():
        compiled = pd.read_csv(out / "compile.csv").to_dict("records")
    if not only_eval and not only_compile:
        quality = benchmark_quality(plan.model.d_model < 64, log)
        write_csv(out / "quality.csv", quality)
    else:
        quality = pd.read_csv(out / "quality.csv").to_dict("records") if (out / "quality.csv").exists() else []
    checks = targets(train, evals, startup, nanogpt is not None, compiled)
    write_csv(out / "targets.csv", checks)
    write_report(out, info, matmul, train, evals, startup, checks, command, compiled, quality)
    return {
        "matmul": matmul,
        "train": train,
        "eval": evals,
        "startup": startup,
        "compile": compiled,
        "targets": checks,
        "quality": quality,
    }


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", default="results/reference/bench", help="folder for the tables (default results/reference/bench)"
    )
    parser.add_argument(
        "--nanogpt", type=Path, default=None, help="a checkout of karpathy/nanoGPT to measure side by side"
    )
    parser.add_argument("--quick", action="store_true", help="a tiny model at short lengths (for tests)")
    parser.add_argument(
        "--only-eval",
        action="store_true",
        help="re-measure evaluation only; keep the other tables of the last full run",
    )
    parser.add_argument(
        "--encodings",
        default=None,
        help="with --only-eval: re-measure these (comma-separated, e.g. rope,rope+self-extend) with the rows their "
        "ratios divide by (none, and a remapping's plain encoding); keep the other rows and their ratios",
    )
    parser.add_argument(
        "--only-compile",
        action="store_true",
        help="re-measure training with --compile against eager only; keep the other tables",
    )
    parser.add_argument(
        "--only-train",
        action="store_true",
        help="re-measure the matmul peak and training rows only; keep the other tables",
    )
    parser.add_argument(
        "--only-quality",
        action="store_true",
        help="re-measure time to quality only (poscli's recipe and nanoGPT's side by side); keep the other tables",
    )
    parser.add_argument("--eval-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    plan = Plan.quick() if args.quick else Plan(ModelConfig())
    plan_args = ["--quick"] if args.quick else []
    if args.eval_child:
        user_defined()  # examples/ importable in the child too
        print(json.dumps([row for pe in args.eval_child.split(",") for row in eval_child(pe, plan)]))
        return
    if args.nanogpt is not None and not (args.nanogpt / "model.py").is_file():
        sys.exit(f"error: --nanogpt {args.nanogpt}: no model.py there; pass a checkout of github.com/karpathy/nanoGPT")
    command = (
        "make bench" + (f" NANOGPT={args.nanogpt}" if args.nanogpt else "")
        if not args.quick
        else "python -m benchmarks.bench --quick"
    )
    only = args.encodings.split(",") if args.encodings else None
    if only and not args.only_eval:
        sys.exit("error: --encodings goes with --only-eval (a full run measures every encoding)")
    if only and "none" not in only and not (Path(args.out) / "eval.csv").exists():
        sys.exit("error: --encodings needs none among them when there is no earlier eval.csv (ratios are to none)")
    quick = " --quick" if args.quick else ""
    other = "the other tables from the last make bench"
    if args.only_eval:
        which = f" --encodings {args.encodings}" if only else ""
        command = f"python -m benchmarks.bench --only-eval{which}{quick} (eval rows; {other})"
    if args.only_compile:
        command = f"python -m benchmarks.bench --only-compile{quick} (compile rows; {other})"
    if args.only_train:
        command = f"python -m benchmarks.bench --only-train{quick} (matmul and training rows; {other})"
    if args.only_quality:
        command = f"python -m benchmarks.bench --only-quality{quick} (time to quality; {other})"
    start = time.perf_counter()
    run(
        Path(args.out),
        plan,
        plan_args,
        args.nanogpt,
        command,
        only_eval=args.only_eval or args.only_compile,
        only=only,
        only_compile=args.only_compile,
        only_train=args.only_train,
        only_quality=args.only_quality,
    )
    print(f"benchmarks done in {(time.perf_counter() - start) / 60:.1f} min; tables in {args.out}")


if __name__ == "__main__":
    main()
