"""``make gpu-check``: what a CUDA machine adds, checked and measured in a few minutes.

1. FlexAttention (``poscli.attention.flex``) against the float64 textbook attention, forward and gradients,
   for every score-bias encoding, at a length that crosses its blocks.
2. A short ``--size small`` training per encoding with bf16 and ``--compile``: tokens/s, MFU
   against the GPU's measured bf16 matmul peak, and peak memory beside poscli's estimate.
3. ALiBi at 16k through FlexAttention against PyTorch's causal SDPA kernel without a bias
   (issue 19's bar: within 1.5x).

On a machine without CUDA it says so and exits 0. ``--device cpu --quick`` runs the same code at
toy sizes (the tests do), eager FlexAttention forward only, without compile.

    python -m benchmarks.gpu_check [--device cuda] [--steps 30] [--out results/gpu-check]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

ENCODINGS = ("none", "rope", "alibi", "t5", "shaw", "kerple", "fire")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_flex(device: torch.device, length: int, backward: bool) -> list[dict]:
    """Max error of FlexAttention against float64 textbook attention, per bias encoding."""
    from poscli import encodings
    from poscli.attention import flex
    from poscli.config import ModelConfig

    rows = []
    for name in ENCODINGS:
        if not encodings.get(name).has_score_bias:
            continue
        torch.manual_seed(0)
        encoding = encodings.build(ModelConfig(pe=name, n_head=4, d_model=64)).to(device)
        with torch.no_grad():
            for parameter in encoding.parameters():
                parameter.normal_(std=0.5)
        q, k, v = (torch.randn(1, 4, length, 16, device=device, requires_grad=backward) for _ in range(3))
        positions = torch.arange(length, device=device)
        score_mod = flex.score_mod_for(encoding, q, positions, 0)
        got = flex.flex_causal_attention(q, k, v, score_mod, compiled=device.type == "cuda")
        bias = encoding.score_bias(q, positions, positions, 0).double()
        scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(16) + bias
        scores = scores.masked_fill(torch.ones(length, length, dtype=torch.bool, device=device).triu(1), float("-inf"))
        want = scores.softmax(-1) @ v.double()
        row = {
            "encoding": name,
            "length": length,
            "forward_max_error": float((got.detach().double() - want.detach()).abs().max()),
        }
        if backward:
            got_grads = torch.autograd.grad(got.float().square().sum(), (q, k, v))
            want_grads = torch.autograd.grad(want.square().sum(), (q, k, v))
            row["grad_max_relative_error"] = max(
                float((a.double() - b).abs().max() / b.abs().max()) for a, b in zip(got_grads, want_grads)
            )
        rows.append(row)
    return rows


def matmul_peak_tflops(device: torch.device, dtype: torch.dtype, size: int) -> float:
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    _sync(device)
    start = time.perf_counter()
    repeats = 10
    for _ in range(repeats):
        a @ b
    _sync(device)
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e12


def check_training(
    device: torch.device,
    size: str,
    steps: int,
    dtype: str,
    compile: bool,
    out: Path,
    peak_tflops: float,
    names: tuple[str, ...] = ENCODINGS,
) -> list[dict]:
    """A short training run per encoding at a --size preset; its own tokens/s and peak memory."""
    from benchmarks.bench import training_flops_per_token
    from poscli.config import ModelConfig, TrainConfig
    from poscli.training.options import SIZES
    from poscli.training.train import train

    preset = SIZES[size]
    rows = []
    for name in names:
        model = ModelConfig(
            pe=name,
            n_layer=preset["layers"],
            n_head=preset["heads"],
            d_model=preset["width"],
            train_length=preset["train_length"],
        )
        config = TrainConfig(
            size=size,
            batch_size=preset["batch_size"],
            lr=preset["lr"],
            warmup_steps=min(preset["warmup"], steps // 2),
            steps=steps,
            dtype=dtype,
            compile=compile,
            device=str(device),
            log_every=max(1, steps // 3),
            checkpoint_every=10**9,
            eval_tokens=preset["train_length"] * 4,
        )
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        result = train(model, config, name=f"gpu-check-{name}", results=out, show_progress=False, replace=True)
        saved = json.loads((result.run / "config.json").read_text())
        flops = training_flops_per_token(replace(model, vocab_size=saved["model"]["vocab_size"]))
        speed = saved.get("tokens_per_s", 0)
        rows.append(
            {
                "encoding": name,
                "size": size,
                "dtype": dtype,
                "compile": compile,
                "tokens_per_s": speed,
                "mfu": round(speed * flops / (peak_tflops * 1e12), 3) if peak_tflops else None,
                "peak_memory_gib": saved.get("peak_memory_gib"),
                "estimate_gib": saved.get("memory_estimate_gib"),
            }
        )
    return rows


def check_long_alibi(device: torch.device, length: int, repeats: int = 5) -> dict:
    """Seconds of one forward at ``length``: ALiBi through FlexAttention against causal SDPA."""
    import torch.nn.functional as F

    from poscli.attention import flex

    heads, head_dim = 8, 64
    q, k, v = (
        torch.randn(
            1, heads, length, head_dim, device=device, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32
        )
        for _ in range(3)
    )
    slopes = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)], device=device)
    from poscli.attention.blockwise import RelativeBias

    score_mod = flex.relative_score_mod(RelativeBias(slopes=slopes))

    def timed(run) -> float:
        run()
        _sync(device)
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        _sync(device)
        return (time.perf_counter() - start) / repeats

    with torch.no_grad():
        sdpa = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        biased = timed(lambda: flex.flex_causal_attention(q, k, v, score_mod, compiled=device.type == "cuda"))
    return {
        "length": length,
        "sdpa_seconds": round(sdpa, 5),
        "flex_alibi_seconds": round(biased, 5),
        "ratio": round(biased / sdpa, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=30, help="training steps per encoding")
    parser.add_argument(
        "--quick", action="store_true", help="toy sizes (for tests): eager flex, forward only, no compile"
    )
    parser.add_argument("--out", type=Path, default=None, help="write gpu-check.json here (default: print only)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            "gpu-check: no CUDA device on this machine; nothing to check (the CPU paths are covered by make test and "
            "make bench)"
        )
        return 0
    report: dict = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
    }
    quick = args.quick
    report["flex"] = check_flex(device, 96 if quick else 1000, backward=not quick)
    for row in report["flex"]:
        print(
            f"flex {row['encoding']} @ {row['length']}: forward error {row['forward_max_error']:.1e}"
            + (
                f", gradient relative error {row['grad_max_relative_error']:.1e}"
                if "grad_max_relative_error" in row
                else ""
            )
        )
    peak = 0.0 if quick else matmul_peak_tflops(device, torch.bfloat16, 8192)
    report["bf16_matmul_tflops"] = round(peak, 1)
    with tempfile.TemporaryDirectory() as scratch:
        report["training"] = check_training(
            device,
            "tiny" if quick else "small",
            4 if quick else args.steps,
            "fp32" if quick else "bf16",
            not quick,
            Path(scratch),
            peak,
            ("alibi",) if quick else ENCODINGS,
        )
    for row in report["training"]:
        print(
            f"train {row['encoding']} --size {row['size']} {row['dtype']}{' --compile' if row['compile'] else ''}: "
            f"{row['tokens_per_s']:,} tok/s, MFU {row['mfu']}, peak {row['peak_memory_gib']} GiB (estimate "
            f"{row['estimate_gib']} GiB)"
        )
    report["alibi_long"] = check_long_alibi(device, 512 if quick else 16384)
    long = report["alibi_long"]
    print(
        f"alibi @ {long['length']}: flex {long['flex_alibi_seconds']} s against causal SDPA {long['sdpa_seconds']} s = "
        f"{long['ratio']}x (bar: 1.5x)"
    )
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu-check.json").write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out / 'gpu-check.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
