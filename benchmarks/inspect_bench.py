"""``poscli inspect``'s cost against ``poscli eval``'s (issue 67's bar: at 8k within 3x eval's time and under
1 GiB; at 32k, for the bias and rotary encodings, under 2 GiB).

    python -m benchmarks.inspect_bench --out results/reference/bench   # part of make bench

Each (encoding, length) in a fresh process, so its peak resident memory is its own: the default model (4
layers x 128, 4 heads) at initialisation, one window of random tokens, ``perplexity`` (eval's own loop)
then ``inspect_length`` on the same window, each the median of 3 (1 at 32k). Writes inspect.csv and
inspect.md; the bars are checked in the markdown's last column.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES = [(pe, 8192) for pe in ("none", "sinusoidal", "rope", "alibi", "t5")] + [(pe, 32768) for pe in ("rope", "alibi")]
BARS = {8192: (3.0, 1.0), 32768: (None, 2.0)}  # length -> (x eval's time, GiB)


def child(pe: str, length: int, repeats: int) -> dict:
    import numpy as np
    import torch

    from benchmarks.bench import peak_memory_gib
    from poscli.config import ModelConfig
    from poscli.evaluation.evalset import EvalSet
    from poscli.evaluation.evaluate import perplexity
    from poscli.evaluation.inspection.measure import inspect_length
    from poscli.model.gpt import GPT

    torch.manual_seed(0)
    model = GPT(ModelConfig(pe=pe, train_length=256)).eval()
    spans = np.random.default_rng(0).integers(0, 256, (1, length + 1), dtype=np.uint8)
    eval_set = EvalSet("random", "stream", length, spans, np.arange(1), [{0}])
    config = {"name": pe, "model": model.config.to_dict()}
    timings: dict[str, list[float]] = {"eval": [], "inspect": []}
    for _ in range(repeats):
        start = time.perf_counter()
        perplexity(model, eval_set, length, "cpu")
        timings["eval"].append(time.perf_counter() - start)
    eval_peak = peak_memory_gib()
    for _ in range(repeats):
        start = time.perf_counter()
        inspect_length(model, config, eval_set, length, "cpu")
        timings["inspect"].append(time.perf_counter() - start)
    eval_s, inspect_s = statistics.median(timings["eval"]), statistics.median(timings["inspect"])
    return {
        "encoding": pe,
        "length": length,
        "eval_s": round(eval_s, 3),
        "inspect_s": round(inspect_s, 3),
        "x_eval": round(inspect_s / eval_s, 2),
        "eval_peak_gib": round(eval_peak, 3),
        "peak_gib": round(peak_memory_gib(), 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/reference/bench"))
    parser.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        pe, length = args.child[0], int(args.child[1])
        print(json.dumps(child(pe, length, 3 if length <= 8192 else 1)))
        return
    rows = []
    for pe, length in CASES:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.inspect_bench", "--child", pe, str(length)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    write(rows, args.out)


def write(rows: list[dict], out: Path) -> None:
    import pandas as pd

    from poscli.core.provenance import git_commit

    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "inspect.csv", index=False)
    commit = (git_commit() or "an uncommitted tree")[:7]
    lines = [
        "# poscli inspect against poscli eval",
        "",
        f"`python -m benchmarks.inspect_bench` at {commit}: one window of the default model (4 x 128) at "
        "initialisation, each row in a fresh process, the median of 3 (1 at 32k). Bars (issue 67): at 8k within 3x "
        "eval's time and under 1 GiB; at 32k under 2 GiB.",
        "",
        "| encoding | length | eval s | inspect s | x eval | peak GiB (eval) | peak GiB (inspect) | bar |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        times, memory = BARS[row["length"]]
        met = (times is None or row["x_eval"] <= times) and row["peak_gib"] <= memory
        times_cells = f"{row['eval_s']:.2f} | {row['inspect_s']:.2f} | {row['x_eval']:.2f}"
        memory_cells = f"{row['eval_peak_gib']:.2f} | {row['peak_gib']:.2f}"
        lines.append(
            f"| {row['encoding']} | {row['length']} | {times_cells} | {memory_cells} | {'met' if met else 'not met'} |"
        )
    (out / "inspect.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
