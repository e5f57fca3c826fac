"""Sliding windows, loss by position, passkey retrieval, plots, the decay figure and the report."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from poscli.data import passkey
from poscli.data.corpus import load_corpus
from poscli.errors import PoscliError
from poscli.evaluation import stats
from poscli.evaluation.by_position import loss_by_position, position_buckets
from poscli.evaluation.decay import attention_decay
from poscli.evaluation.evalset import build_eval_set
from poscli.evaluation.evaluate import perplexity
from poscli.model.gpt import GPT
from tests.cli.test_cli import TINY, poscli
from tests.conftest import tiny_config


@pytest.fixture
def model_and_corpus(text_corpus):
    torch.manual_seed(0)
    model = GPT(tiny_config("alibi")).eval()
    return model, load_corpus(str(text_corpus))


def test_sliding_perplexity_with_stride_equal_to_the_window_is_the_nonoverlapping_one(model_and_corpus):
    model, corpus = model_and_corpus
    eval_set = build_eval_set(corpus, 96, 10**4)
    plain = perplexity(model, eval_set, 48, "cpu")
    sliding = perplexity(model, eval_set, 48, "cpu", stride=48)
    assert sliding["tokens"] == plain["tokens"] and sliding["ppl"] == pytest.approx(plain["ppl"], rel=1e-9)


def test_sliding_perplexity_scores_as_many_tokens_with_more_context(model_and_corpus):
    model, corpus = model_and_corpus
    sliding = perplexity(model, build_eval_set(corpus, 480, 10**4), 48, "cpu", stride=12)
    assert sliding["position_tokens"][:36].sum() < sliding["position_tokens"][36:].sum()


def test_loss_by_position_buckets_average_back_to_the_overall_loss(model_and_corpus):
    model, corpus = model_and_corpus
    result = perplexity(model, build_eval_set(corpus, 100, 10**4), 100, "cpu")
    buckets = loss_by_position(result["position_loss"], result["position_tokens"], 100)
    assert sum(b["tokens"] for b in buckets) == result["tokens"]
    weighted = sum(b["loss"] * b["tokens"] for b in buckets) / result["tokens"]
    assert weighted == pytest.approx(result["loss"], rel=1e-9)


def test_position_buckets_are_log_spaced_and_cover_every_position():
    buckets = position_buckets(256)
    assert buckets[0] == (0, 1) and buckets[-1][1] == 256
    assert all(a[1] == b[0] for a, b in zip(buckets, buckets[1:]))
    widths = [end - start for start, end in buckets]
    assert widths[-1] > 8 * widths[0]


def test_wilson_interval_brackets_the_rate_and_narrows_with_trials():
    low, high = stats.wilson_interval(10, 20)
    assert low < 0.5 < high
    narrow = stats.wilson_interval(100, 200)
    assert narrow[1] - narrow[0] < high - low
    assert stats.wilson_interval(0, 20)[0] == 0 and stats.wilson_interval(20, 20)[1] == 1


@pytest.mark.parametrize("text", ["passkey", "passkey:0", "passkey:1.5", ":0.2", "passkey:x"])
def test_bad_mix_is_a_clear_error(text):
    with pytest.raises(PoscliError, match="--mix"):
        passkey.parse_mix(text)


def test_decay_matches_a_direct_computation():
    dim, base, pairs = 16, 10000.0, 5
    result = attention_decay(dim=dim, base=base, max_distance=40, pairs=pairs, seed=3)
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(pairs, dim, generator=generator, dtype=torch.float64)
    k = torch.randn(pairs, dim, generator=generator, dtype=torch.float64)
    for distance in (0, 1, 7, 40):
        pe = lambda pos: torch.tensor(  # noqa: E731
            [f(pos / base ** (2 * (t // 2) / dim)) for t, f in zip(range(dim), [math.sin, math.cos] * (dim // 2))],
            dtype=torch.float64,
        )
        sinusoidal = ((q + pe(0)) * (k + pe(distance))).sum(-1).mean()
        rotation = torch.zeros(dim, dim, dtype=torch.float64)  # block-diagonal R(distance)
        for i in range(dim // 2):
            angle = distance * base ** (-2 * i / dim)
            c, s = math.cos(angle), math.sin(angle)
            rotation[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
        rope = (q * (k @ rotation.T)).sum(-1).mean()
        assert result["sinusoidal"][distance].item() == pytest.approx(
            sinusoidal.item(), rel=1e-6
        )  # PE table is float32
        assert result["rope"][distance].item() == pytest.approx(rope.item(), rel=1e-6, abs=1e-9)  # inv_freq is float32


@pytest.fixture(scope="module")
def passkey_run(tmp_path_factory):
    from tests.conftest import write_text_corpus

    base = tmp_path_factory.mktemp("suite")
    corpus = write_text_corpus(base / "corpus", documents=12, words=1200)
    results = base / "results"
    args = [*TINY]
    args[args.index("--train-length") + 1] = "128"
    done = poscli(
        "train",
        "--pe",
        "alibi",
        "--data",
        str(corpus),
        "--mix",
        "passkey:0.5",
        "--steps",
        "4",
        "--results",
        str(results),
        *args,
    )
    assert done.returncode == 0, done.stderr
    return results


@pytest.mark.slow
def test_the_whole_suite_writes_every_table_and_plot(passkey_run):
    results = passkey_run
    for args in (
        ["eval", "alibi", "--lengths", "128,256"],
        ["eval", "alibi", "--lengths", "128,256", "--stride", "32"],
        ["eval", "alibi", "--task", "passkey", "--lengths", "128,256", "--depths", "0,50,100", "--trials", "3"],
        ["plot", "decay", "--max-distance", "64"],
        ["report"],
    ):
        done = (
            poscli(*args, "--results", str(results), "--quiet")
            if args[0] == "eval"
            else poscli(*args, "--results", str(results))
        )
        assert done.returncode == 0, (args, done.stderr)
    for name in (
        "ppl.csv",
        "ppl.md",
        "ppl.png",
        "ppl_by_position.csv",
        "ppl_by_position.png",
        "passkey.csv",
        "passkey.md",
        "passkey-alibi.png",
        "decay.png",
        "decay.csv",
        "REPORT.md",
        "history.jsonl",
    ):
        assert (results / name).stat().st_size > 0, name
    for png in results.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = pd.read_csv(results / "ppl.csv")
    assert set(table["mode"]) == {"nonoverlapping", "sliding-32"}
    positions = pd.read_csv(results / "ppl_by_position.csv")
    for (length, mode), trigram in positions[positions["pe"] == "reference"].groupby(["length", "mode"]):
        row = table[(table["pe"] == "reference") & (table["length"] == length) & (table["mode"] == mode)].iloc[0]
        assert trigram["tokens"].sum() == row["tokens"], "the 3-gram's curve covers the targets of its row"
        assert (trigram["loss"] * trigram["tokens"]).sum() / row["tokens"] == pytest.approx(row["loss"], rel=1e-9)
    cells = pd.read_csv(results / "passkey.csv")
    assert len(cells) == 6 and cells["accuracy"].between(0, 1).all() and (cells["ci_low"] <= cells["accuracy"]).all()
    assert cells["digit_accuracy"].between(0, 1).all() and (cells["answer_logprob"] <= 0).all()
    assert set(cells["template"]) == {"compact"} and set(cells["keys"]) == {1}  # the format the run trained on
    report = (results / "REPORT.md").read_text()
    assert (
        "poscli eval alibi --lengths 128,256 --stride 32" in report and "![passkey-alibi](passkey-alibi.png)" in report
    )
    assert "torch" in report and "## Runs" in report
    config = json.loads((results / "runs" / "alibi" / "config.json").read_text())
    assert config["train"]["mix"] == "passkey:0.5"
    assert (
        config["train"]["passkey_template"],
        config["train"]["passkey_keys"],
        config["train"]["passkey_lengths"],
    ) == ("compact", 1, "random")


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["eval", "alibi", "--task", "passkey", "--depths", "0,150"], "between 0 and 100"),
        (
            ["eval", "alibi", "--task", "passkey", "--lengths", "32"],
            "passkey prompt with 1 key(s) needs at least 82 tokens",
        ),
        (["eval", "alibi", "--task", "passkey", "--lengths", "256", "--keys", "13"], "holds 1 to 12 keys"),
        (["train", "--mix", "passkey:0.5", "--passkey-template", "paper", "--passkey-keys", "2"], "holds 1 to 1 keys"),
        (["train", "--answer-loss", "1"], "--answer-loss weighs the answers of mixed-in examples"),
        (
            ["train", "--mix", "passkey:0.5", "--passkey-keys", "4", "--train-length", "128"],
            "needs a train length of at least",
        ),
        (["eval", "alibi", "--stride", "500", "--lengths", "128"], "--stride 500 is longer than the length 128"),
        (["plot", "decay", "--dim", "7"], "--dim must be an even number"),
        (["train", "--mix", "passkey:2"], "--mix 'passkey:2'"),
    ],
)
def test_suite_errors_are_one_line_exit_2(passkey_run, args, message):
    done = poscli(*args, "--results", str(passkey_run))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_passkey_rows_reach_the_table_run_by_run(passkey_run):
    """An evaluation of many runs stopped midway keeps the runs it finished (the recipe then scores only the rest)."""
    from poscli.evaluation.passkey_tables import save_rows
    from poscli.evaluation.retrieval import evaluate_passkey

    saved = []

    def save(rows):
        saved.append(len(rows))
        save_rows(rows, passkey_run, "partial")

    evaluate_passkey(["alibi", "alibi"], [128], [0.0, 100.0], trials=2, results=passkey_run, save=save)
    assert saved == [2, 2]
    assert len(pd.read_csv(passkey_run / "partial.csv")) == 2  # the same run's rows replaced, not added
    assert not (passkey_run / "partial.md").exists()  # the Markdown and plots come once, at the end


def test_perplexity_rows_reach_the_table_run_by_run(passkey_run):
    """The same for perplexity: each run's rows, spans and positions are merged into TABLE.csv as
    it finishes; a run that failed after them keeps them (here: the second run is missing)."""
    from poscli.errors import PoscliError
    from poscli.evaluation.evaluate import evaluate_runs
    from poscli.evaluation.perplexity_tables import write_tables

    saved = []

    def save(part):
        saved.append({row["run"] for row in part["rows"]})
        write_tables(part, passkey_run, "partial-ppl", draw=False)
        raise PoscliError("stopped after the first run")

    with pytest.raises(PoscliError, match="stopped"):
        evaluate_runs(["alibi", "alibi"], [32, 128], passkey_run, max_tokens=1024, save=save)
    assert saved == [{"alibi"}]
    table = pd.read_csv(passkey_run / "partial-ppl.csv")
    assert set(table["length"]) == {32, 128} and (passkey_run / "partial-ppl_spans.csv").exists()
    assert not (passkey_run / "partial-ppl.md").exists()


def test_the_loss_taken_in_slices_equals_the_loss_taken_whole(monkeypatch):
    """A long window of a large vocabulary: its float64 loss in slices of positions is the loss of
    the whole logits; batches stay within the logits budget."""
    import torch.nn.functional as F

    from poscli.evaluation import evaluate

    logits, targets = torch.randn(3, 50, 70, generator=torch.Generator().manual_seed(0)), torch.randint(0, 70, (3, 50))
    whole = F.cross_entropy(logits.transpose(1, 2).double(), targets, reduction="none").numpy()
    monkeypatch.setattr(evaluate, "EVAL_BATCH_LOGITS", 3 * 70 * 7)  # slices of 7 positions, the last of 1
    np.testing.assert_allclose(evaluate.token_losses(logits, targets), whole, rtol=1e-13)
    assert evaluate.eval_batch_size(10, 70) == 2 and evaluate.eval_batch_size(1000, 70) == 1
