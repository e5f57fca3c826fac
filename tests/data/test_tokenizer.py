"""Tokenizers: bytes and a byte-level BPE trained here (offline, about a second)."""

import numpy as np
import pytest

from poscli.data.tokenizer import ByteTokenizer, bytes_to_unicode, load_file, parse_spec, token_dtype, train_bpe
from poscli.errors import PoscliError

TEXTS = [
    "def mean(values):\n    return sum(values) / len(values)\n\n",
    "The quick brown fox jumps over the lazy dog. " * 20,
    "class Tree:\n    def __init__(self, left, right):\n        self.left, self.right = left, right\n" * 10,
    "import os\nimport sys\nprint(os.getcwd(), sys.argv)\n" * 10,
]
UNSEEN = "Ünïcödé 🚀 and bytes the trainer never saw: \t\x01 ∑ 12345 — ok\n"


@pytest.fixture(scope="module")
def bpe():
    return train_bpe(TEXTS * 5, 300)


def test_the_byte_tokenizer_is_one_token_per_utf8_byte():
    tokenizer = ByteTokenizer()
    ids = tokenizer.encode(UNSEEN)
    assert ids.dtype == np.uint8 and len(ids) == len(UNSEEN.encode("utf-8")) and tokenizer.decode(ids) == UNSEEN
    assert tokenizer.token_bytes()[ids].sum() == len(UNSEEN.encode("utf-8"))


def test_a_trained_bpe_has_the_asked_vocabulary_and_round_trips_any_text(bpe):
    assert bpe.vocab_size == 300 and bpe.spec == "bpe:300"
    for text in [*TEXTS, UNSEEN]:
        ids = bpe.encode(text)
        assert ids.dtype == np.uint16 and bpe.decode(ids) == text
    assert len(bpe.encode(TEXTS[1])) < len(TEXTS[1].encode()) / 2  # the merges compress the text they came from


def test_token_bytes_add_up_to_the_texts_bytes_so_bits_per_byte_are_comparable(bpe):
    lengths = bpe.token_bytes()
    assert lengths.min() >= 1
    for text in [*TEXTS, UNSEEN]:
        assert lengths[bpe.encode(text)].sum() == len(text.encode("utf-8"))


def test_digits_are_single_tokens_so_a_passkey_is_five_tokens(bpe):
    ids = bpe.encode(" The pass key is 12345.")
    digits = [bpe.decode([i]) for i in ids if bpe.decode([i]).strip().isdigit()]
    assert digits == list("12345")


def test_a_saved_tokenizer_loads_with_the_same_ids(bpe, tmp_path):
    bpe.save(tmp_path)
    for path in (tmp_path, tmp_path / "tokenizer.json"):
        loaded = load_file(path)
        assert loaded.vocab_size == bpe.vocab_size and (loaded.encode(UNSEEN) == bpe.encode(UNSEEN)).all()
        assert loaded.fingerprint() == bpe.fingerprint()


def test_gpt2_byte_map_is_a_bijection_onto_printable_characters():
    mapping = bytes_to_unicode()
    assert len(mapping) == 256 and len(set(mapping.values())) == 256
    assert mapping[ord("A")] == "A" and mapping[ord(" ")] == "Ġ" and mapping[ord("\n")] == "Ċ"  # GPT-2's


@pytest.mark.parametrize(
    "spec, phrase",
    [
        ("bpe:abc", "whole number"),
        ("bpe:100", "between 257"),
        ("bpe:99999999", "between 257"),
    ],
)
def test_a_bad_tokenizer_spec_is_one_line_saying_what_to_type(spec, phrase):
    with pytest.raises(PoscliError, match=phrase) as caught:
        parse_spec(spec)
    assert "\n" not in str(caught.value) and "--tokenizer" in str(caught.value)


def test_a_missing_or_malformed_tokenizer_file_is_one_line(tmp_path):
    with pytest.raises(PoscliError, match="no such file"):
        load_file(tmp_path / "nope.json")
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(PoscliError, match="is not a tokenizer.json") as caught:
        load_file(tmp_path)
    assert "\n" not in str(caught.value)


def test_ids_are_stored_in_the_smallest_type():
    assert token_dtype(256) == np.uint8 and token_dtype(257) == np.uint16 and token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32


def test_passkey_prompts_in_bpe_tokens_have_the_exact_length_and_the_key_at_its_depth(bpe):
    import random

    from poscli.data.passkey import draw_needles, make_prompt_tokens, training_sequence

    for length, depth in [(200, 0), (300, 50), (500, 100)]:
        needles = draw_needles(random.Random(length), depth, 1)
        prompt = make_prompt_tokens(length, needles, "compact", bpe)
        text = bpe.decode(prompt)
        assert len(prompt) == length and text.endswith(
            f"What is the {needles[0].name} pass key? The {needles[0].name} pass key is "
        )
        sentence = f"The {needles[0].name} pass key is {needles[0].key}. "
        question = f"What is the {needles[0].name} pass key? The {needles[0].name} pass key is "
        filler = len(text) - len(sentence) - len(question)
        # at a filler sentence boundary (sentences are at most 22 characters) at or before the depth
        assert 0 <= depth / 100 * filler - text.index(sentence) <= 22, (depth, text.index(sentence), filler)
    tokens, answer_start = training_sequence(300, random.Random(0), "compact", 1, bpe)
    assert len(tokens) == 300 and bpe.decode(tokens[answer_start:]).rstrip(".").isdigit()


def test_a_tokenizer_that_merges_digits_cannot_score_a_passkey(tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from poscli.data.passkey import check_tokenizer
    from poscli.data.tokenizer import HFTokenizer

    merging = Tokenizer(models.BPE())
    merging.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    merging.decoder = decoders.ByteLevel()
    merging.train_from_iterator(
        ["12345 67890 " * 200],
        trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False),
    )
    with pytest.raises(PoscliError, match="merges digits"):
        check_tokenizer(HFTokenizer(merging, "file"))
