"""A corpus larger than this machine would like in memory: write SIZE of text, prepare it with
``poscli data prepare`` and train on it, each step under /usr/bin/time, and print the time and
peak resident memory of each (``make bench-data``).

    python tools/bench_data.py --size 2G --steps 200 --out /tmp/poscli-bench-data

The text is generated (lines of random words from a 5,000-word vocabulary drawn with Zipf's law),
so the benchmark needs no download; it is written once and reused when it already has the size.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from poscli.core.lengths import parse_size


def write_text(path: Path, size: int, seed: int = 0) -> None:
    """``size`` bytes of generated text in ``path``: lines of Zipf-distributed words."""
    if path.exists() and path.stat().st_size >= size:
        return
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocabulary = ["".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(5000)]
    ranks = 1.0 / np.arange(1, len(vocabulary) + 1)
    probabilities = ranks / ranks.sum()
    written = 0
    with open(path, "w", encoding="utf-8") as handle:
        while written < size:
            words = rng.choice(len(vocabulary), size=200_000, p=probabilities)
            lines = [" ".join(vocabulary[w] for w in words[i : i + 12]) + ".\n" for i in range(0, len(words), 12)]
            block = "".join(lines)
            handle.write(block)
            written += len(block)


def timed(command: list[str], log: Path) -> tuple[float, float]:
    """(seconds, peak resident GiB) of ``command`` under /usr/bin/time -v."""
    started = time.perf_counter()
    with open(log, "w") as handle:
        done = subprocess.run(["/usr/bin/time", "-v", *command], stdout=handle, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - started
    text = log.read_text()
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed; see {log}")
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    return seconds, peak_kb / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="2G", help="text to generate, e.g. 2G")
    parser.add_argument("--steps", type=int, default=200, help="training steps on the prepared corpus")
    parser.add_argument("--tokenizer", default="bytes", help="bytes or bpe:N")
    parser.add_argument(
        "--out", default="/tmp/poscli-bench-data", help="a scratch folder (needs about 2x SIZE of disk)"
    )
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    size = parse_size(args.size)
    text = out / "corpus.txt"
    started = time.perf_counter()
    write_text(text, size)
    print(f"text: {text.stat().st_size / 2**30:.2f} GiB ({time.perf_counter() - started:.0f} s to write or find)")
    prepared = out / f"prepared-{args.tokenizer.replace(':', '')}"
    shutil.rmtree(prepared, ignore_errors=True)
    poscli = [sys.executable, "-m", "poscli"]
    rows = []
    rows.append(
        (
            "prepare",
            *timed(
                [
                    *poscli,
                    "data",
                    "prepare",
                    str(text),
                    "--out",
                    str(prepared),
                    "--tokenizer",
                    args.tokenizer,
                    "--quiet",
                ],
                out / "prepare.log",
            ),
        )
    )
    results = out / "results"
    shutil.rmtree(results, ignore_errors=True)
    rows.append(
        (
            f"train {args.steps} steps",
            *timed(
                [
                    *poscli,
                    "train",
                    "--data",
                    str(prepared),
                    "--steps",
                    str(args.steps),
                    "--name",
                    "big",
                    "--results",
                    str(results),
                    "--quiet",
                ],
                out / "train.log",
            ),
        )
    )
    rows.append(
        (
            "eval 1k, 4k",
            *timed(
                [*poscli, "eval", "big", "--lengths", "1k,4k", "--results", str(results), "--quiet"], out / "eval.log"
            ),
        )
    )
    print(
        f"\n| step ({args.tokenizer}, {text.stat().st_size / 2**30:.2f} GiB of text, {os.cpu_count()} cores) | seconds "
        "| peak RSS (GiB) |"
    )
    print("|---|---|---|")
    for name, seconds, peak in rows:
        print(f"| {name} | {seconds:.0f} | {peak:.2f} |")


if __name__ == "__main__":
    main()
