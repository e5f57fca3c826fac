"""The measurement protocol: the same scored tokens at every length, intervals, the reference
row, a clean held-out split and its check."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from poscli.data import corpus as data
from poscli.data import duplicates
from poscli.data.corpus import load_corpus, stratified_split
from poscli.data.duplicates import near_duplicate_groups, shingle_hashes
from poscli.errors import PoscliError
from poscli.evaluation.evalset import MIN_SPANS, build_eval_set, null_stride, span_windows, truncated_windows
from poscli.evaluation.evaluate import perplexity
from poscli.evaluation.reference import NGram
from poscli.evaluation.stats import bootstrap_perplexity, interval
from poscli.study.paired import class_verdict, interval_class, ranked
from tests.conftest import write_text_corpus


class CurrentTokenOnly(torch.nn.Module):
    """A model whose logits depend only on the current input token: no context, no position."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.table = torch.nn.Embedding(256, 256)

    def forward(self, tokens):  # (B, T) -> (B, T, V)
        return self.table(tokens)


@pytest.fixture
def corpus(tmp_path):
    return load_corpus(str(write_text_corpus(tmp_path / "corpus", documents=30, words=600)))


@pytest.mark.parametrize("span_length", [1, 7, 64, 100])
@pytest.mark.parametrize("length", [1, 3, 16, 64, 100])
@pytest.mark.parametrize("stride", [None, 1, 5, 16])
def test_every_length_scores_targets_one_to_span_length_exactly_once(span_length, length, stride):
    if stride is not None and stride > length:
        return
    scored = []
    windows = span_windows(span_length, length, stride)
    for index, (start, end, first) in enumerate(windows):
        last = index == len(windows) - 1
        assert 0 <= start < end <= span_length
        assert end - start == min(length, span_length) or (stride is None and last), (
            "only a remainder window is shorter"
        )
        assert 0 <= first < end - start
        scored += range(start + 1 + first, end + 1)  # targets are span positions start+1 .. end
    assert sorted(scored) == list(range(1, span_length + 1))


def test_sliding_windows_give_every_target_after_the_first_window_at_least_length_minus_stride_of_context():
    for start, _end, first in span_windows(1000, 64, 16):
        if start > 0:
            assert first >= 48  # the last window may score fewer than S (a remainder), with more context


@pytest.mark.parametrize("span_length", [100, 512, 1000])
@pytest.mark.parametrize("length", [32, 128, 512])
@pytest.mark.parametrize("context", [1, 16, 32, 40])
def test_the_truncation_null_keeps_the_cold_starts_of_its_length_and_cuts_only_the_far_context(
    span_length, length, context
):
    """Every target once; no window crosses a boundary of the non-overlapping windows of ``length``;
    a target at position p of its window of ``length`` sees p inputs while p < C, else between
    C - stride and C - 1: exactly what the model at ``length`` sees, cut to C."""
    seen = {}
    for start, end, first in truncated_windows(span_length, length, context):
        assert end - start <= context
        assert start // length == (end - 1) // length, "a null window crosses a window of the length"
        for target in range(start + 1 + first, end + 1):  # targets are span positions start+1 .. end
            assert target not in seen
            seen[target] = target - 1 - start  # inputs before it in its window
    assert sorted(seen) == list(range(1, span_length + 1))
    for target, inputs in seen.items():
        position = (target - 1) % length  # its position in the non-overlapping window of length
        if position < context:
            assert inputs == position
        else:
            assert context - null_stride(context) <= inputs <= context - 1


def test_the_null_equals_the_model_itself_where_the_length_fits_the_context_and_differs_past_it(corpus):
    from poscli.model.gpt import GPT
    from tests.conftest import tiny_config

    torch.manual_seed(0)
    model = GPT(tiny_config("alibi", train_length=16)).eval()
    eval_set = build_eval_set(corpus, 128, 128 * 8)
    same = perplexity(model, eval_set, 16, "cpu", context=16), perplexity(model, eval_set, 16, "cpu")
    assert np.allclose(same[0]["span_loss"], same[1]["span_loss"], rtol=1e-12, atol=0)
    cut, whole = perplexity(model, eval_set, 128, "cpu", context=16), perplexity(model, eval_set, 128, "cpu")
    assert cut["tokens"] == whole["tokens"] and not np.allclose(cut["span_loss"], whole["span_loss"])


@pytest.mark.parametrize("protocol", ["stream", "documents"])
@pytest.mark.parametrize("stride", [None, 8])
def test_a_context_free_model_has_the_same_perplexity_at_every_length(corpus, protocol, stride):
    eval_set = build_eval_set(corpus, 192, 192 * 12, protocol)
    model = CurrentTokenOnly().eval()
    results = [perplexity(model, eval_set, length, "cpu", stride) for length in (16, 48, 100, 192)]
    assert len({r["tokens"] for r in results}) == 1 and results[0]["tokens"] == eval_set.num_spans * 192
    for result in results[1:]:
        assert result["ppl"] == pytest.approx(results[0]["ppl"], rel=1e-9, abs=0)
        assert np.allclose(result["span_loss"], results[0]["span_loss"], rtol=1e-9, atol=0)
    assert len({r["windows"] for r in results}) == 4  # the windows differ; the scored tokens do not


@pytest.mark.parametrize("stride", [None, 8])
def test_a_context_free_scorers_curve_by_position_is_the_one_the_model_pass_accumulates(corpus, stride):
    """``position_curve`` (how the 3-gram's loss by position is made, with no model run) puts each
    target's loss at the window position ``perplexity`` scores it at: for a model whose loss of a
    target does not depend on its window, the two sums agree at every length and stride."""
    from poscli.evaluation.by_position import position_curve

    eval_set = build_eval_set(corpus, 192, 192 * 12)
    model = CurrentTokenOnly().eval()
    spans = torch.from_numpy(eval_set.spans.astype(np.int64))  # (S, span_length + 1)
    with torch.no_grad():
        logits = model(spans[:, :-1])  # (S, span_length, V)
        token_losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), spans[:, 1:], reduction="none")
    for length in (16, 48, 100, 192):
        result = perplexity(model, eval_set, length, "cpu", stride)
        position_loss, position_tokens = position_curve(token_losses.double().numpy(), eval_set, length, stride)
        assert np.array_equal(position_tokens, result["position_tokens"])
        assert np.allclose(position_loss, result["position_loss"], rtol=1e-5, atol=0)


def test_the_stream_protocol_joins_heldout_documents_and_spreads_its_spans(corpus):
    stream, _ = data.join_documents(corpus.heldout_documents())
    eval_set = build_eval_set(corpus, 128, 128 * 4)
    assert eval_set.num_spans == 4
    for span in eval_set.spans:  # every span is a piece of the held-out stream
        assert any(np.array_equal(stream[k : k + 129], span) for k in range(0, len(stream) - 128, 128))
    everything = build_eval_set(corpus, 128, 10**9)
    assert everything.num_spans == (len(stream) - 1) // 128


def test_the_documents_protocol_uses_as_many_distinct_documents_as_it_can(corpus):
    lengths = corpus.document_lengths()
    long_enough = [d for d in corpus.heldout_indices() if lengths[d] >= 201]
    eval_set = build_eval_set(corpus, 200, 200 * len(long_enough), "documents")
    assert eval_set.num_documents == len(long_enough) == eval_set.num_units
    more = build_eval_set(corpus, 200, 200 * (len(long_enough) + 1), "documents")
    assert more.num_spans == len(long_enough) + 1 and more.num_documents == len(long_enough)


def test_a_thin_cell_says_so(corpus):
    assert build_eval_set(corpus, 64, 64 * MIN_SPANS).note() == ""
    assert "only 3 spans" in build_eval_set(corpus, 64, 64 * 3).note()
    assert "documents" in build_eval_set(corpus, 64, 64, "documents").note()


def test_a_length_past_the_heldout_text_names_what_works(corpus):
    longest = int(corpus.document_lengths()[corpus.heldout].max())
    with pytest.raises(PoscliError, match=f"the longest has {longest} tokens"):
        build_eval_set(corpus, longest, 10**6, "documents")
    build_eval_set(corpus, longest - 1, 10**6, "documents")
    with pytest.raises(PoscliError, match="too few for length"):
        build_eval_set(corpus, 10**8, 10**6, "stream")


def test_the_bootstrap_interval_holds_the_estimate_narrows_with_more_spans_and_is_reproducible():
    rng = np.random.default_rng(1)
    losses = rng.gamma(4.0, 0.5, size=400) * 100  # summed loss of 100 tokens per span
    tokens = np.full(400, 100.0)
    widths = []
    for count in (16, 64, 400):
        samples = bootstrap_perplexity(losses[None, :count], tokens[:count], np.arange(count))
        low, high = interval(samples)
        point = math.exp(losses[:count].sum() / tokens[:count].sum())
        assert low <= point <= high
        widths.append(high - low)
        again = bootstrap_perplexity(losses[None, :count], tokens[:count], np.arange(count))
        assert np.array_equal(samples, again)
    assert widths[0] > widths[1] > widths[2]


def test_the_two_level_bootstrap_widens_with_disagreeing_seeds():
    tokens = np.full(32, 100.0)
    same = np.tile(np.full(32, 200.0), (3, 1))
    spread = same * np.array([[0.9], [1.0], [1.1]])
    narrow = interval(bootstrap_perplexity(same, tokens, np.arange(32)))
    wide = interval(bootstrap_perplexity(spread, tokens, np.arange(32)))
    assert narrow[1] - narrow[0] < 1e-9 and wide[1] - wide[0] > 1.0
    units = np.repeat(np.arange(8), 4)  # spans grouped by document: 8 units
    assert bootstrap_perplexity(spread, tokens, units).shape == (2000,)


def test_the_reference_trigram_matches_its_formula_by_hand():
    train = np.frombuffer(b"abcabcabd", dtype=np.uint8)
    model = NGram.fit(train)
    losses = model.token_losses(np.frombuffer(b"abc", dtype=np.uint8))
    n = len(train)
    p_b = 0.05 * (3 + 1) / (n + 256) + 0.25 * (
        3 / 3
    )  # after "a": P2(b|a) = 3/3; no trigram context for the first target
    p_c = 0.05 * (2 + 1) / (n + 256) + 0.25 * (2 / 3) + 0.7 * (2 / 3)  # after "ab": P3(c|ab) = 2/3, P2(c|b) = 2/3
    assert losses[0] == pytest.approx(-math.log(p_b / 0.30))
    assert losses[1] == pytest.approx(-math.log(p_c / 1.0))


def test_near_duplicates_are_grouped_and_never_straddle_the_split(tmp_path):
    rng = np.random.default_rng(0)
    documents = [rng.integers(32, 127, size=int(rng.integers(2000, 6000)), dtype=np.uint8) for _ in range(40)]
    copy = documents[3].copy()
    copy[::200] = ord("#")  # a near-duplicate: 84% of its 32-byte shingles survive the edits
    documents.append(copy)
    tokens = np.concatenate(documents)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in documents])]).astype(np.int64)
    groups = near_duplicate_groups(offsets, shingle_hashes(tokens, offsets))
    assert groups[3] == groups[40]
    assert len(set(groups.tolist())) == 40  # nothing else grouped
    hashes = [f"{i:040x}" for i in range(41)]
    for fraction in (0.05, 0.1, 0.2, 0.3):
        for start in range(10):  # many different splits: the pair always lands on one side
            shifted = hashes[start:] + hashes[:start]
            heldout = stratified_split(np.diff(offsets), shifted, fraction, groups)
            assert heldout[3] == heldout[40]


def test_shingle_hashes_are_each_documents_sampled_shingles_hashed_byte_by_byte(monkeypatch):
    """Against the definition, one shingle at a time in Python integers modulo 2^64: the sampled
    shingles of each document, none across a boundary, each (hash, document) once; hashed in
    blocks smaller than a document, so a shingle that starts in one block and ends in the next counts."""
    monkeypatch.setattr(duplicates, "SHINGLE_BLOCK", 1000)
    rng = np.random.default_rng(3)
    documents = [rng.integers(97, 100, size=int(n), dtype=np.uint8) for n in rng.integers(10, 2500, size=12)]
    documents[5] = np.tile(documents[4][:40], 30)  # repeats: one shingle many times in one document
    tokens = np.concatenate(documents)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in documents])]).astype(np.int64)
    multipliers = [
        int(m) | 1 for m in np.random.default_rng(20231).integers(1, 2**62, size=duplicates.SHINGLE, dtype=np.uint64)
    ]
    mask = 2**64 - 1
    expected = set()
    for d, document in enumerate(documents):
        for start in range(len(document) - duplicates.SHINGLE + 1):
            h = 0
            for i, byte in enumerate(document[start : start + duplicates.SHINGLE]):
                h = ((h * 1099511628211) & mask) ^ ((int(byte) * multipliers[i]) & mask)
            h ^= h >> 29
            h = (h * 0xBF58476D1CE4E5B9) & mask
            h ^= h >> 32
            if h % duplicates.SHINGLE_SAMPLE == 0:
                expected.add((h, d))
    hashes, owners = duplicates.shingle_hashes(tokens, offsets)
    assert list(zip(hashes.tolist(), owners.tolist(), strict=True)) == sorted(expected)


def test_the_split_is_deterministic_disjoint_and_independent_of_document_order_with_groups():
    rng = np.random.default_rng(0)
    lengths = rng.integers(10, 10000, size=200)
    hashes = [f"{rng.integers(0, 2**62):016x}" for _ in range(200)]
    groups = np.arange(200) // 2  # pairs
    heldout = stratified_split(lengths, hashes, 0.1, groups)
    assert heldout.sum() == 20 and all(heldout[2 * i] == heldout[2 * i + 1] for i in range(100))
    permutation = rng.permutation(200)
    shuffled = stratified_split(lengths[permutation], [hashes[i] for i in permutation], 0.1, groups[permutation])
    assert np.array_equal(shuffled, heldout[permutation])


def test_the_corpus_summary_reports_the_heldout_share_of_training_shingles(corpus):
    summary = corpus.summary()
    assert 0.0 <= summary["heldout_shingles_in_train"] <= summary["heldout_shingles_in_train_worst_document"] <= 1.0
    assert summary["heldout_sha1"] == corpus.heldout_sha1()


def test_intervals_decide_classes_and_orders_only_where_they_separate():
    assert interval_class(1.02, 1.08) == "keeps" and interval_class(1.05, 1.3) == "keeps or degrades gracefully"
    assert class_verdict("keeps", 0.95, 1.05) == "agrees"
    assert class_verdict("keeps", 1.2, 1.5) == "differs"
    assert class_verdict("keeps", 1.05, 1.2).startswith("tied")
    rows = {
        name: pd.Series({"mean": m, "ci_low": lo, "ci_high": hi})
        for name, m, lo, hi in [("a", 1.0, 0.9, 1.1), ("b", 1.5, 1.4, 1.6), ("c", 1.55, 1.45, 1.65)]
    }
    order, text = ranked(rows)
    assert order == ["a", "b", "c"] and text == "a < b ≈ c"
