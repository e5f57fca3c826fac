"""Tokenizers: UTF-8 bytes (the default) or a byte-level BPE from the ``tokenizers`` library.

``--tokenizer`` takes

- ``bytes``: one token per UTF-8 byte, ids 0..255 (``poscli.data.tokens``);
- ``bpe:N``: a byte-level BPE of vocabulary N (GPT-2's construction, Radford et al., 2019; Sennrich
  et al., 2016), trained on the corpus' training split when the run starts, digits kept apart
  (each digit its own token, as Llama's tokenizer does, so a passkey is five tokens), saved as
  ``tokenizer.json`` in the run folder;
- ``PATH``: an existing ``tokenizer.json`` (a file, or a folder holding one).

Lengths (train length, evaluation lengths, passkey lengths) count tokens. Bits per byte divide a
loss by the UTF-8 bytes the scored tokens stand for (``token_bytes``), so byte and BPE runs on the
same text are comparable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from poscli.data import tokens as byte_tokens
from poscli.errors import PoscliError

TOKENIZER_FILE = "tokenizer.json"
MIN_BPE_VOCAB = 257  # the 256 bytes and at least one merge


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds every id: uint8, uint16 or uint32."""
    if vocab_size <= 1 << 8:
        return np.dtype(np.uint8)
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


class ByteTokenizer:
    """One token per UTF-8 byte."""

    spec = "bytes"
    vocab_size = byte_tokens.VOCAB_SIZE

    def encode(self, text: str) -> np.ndarray:
        return byte_tokens.encode(text)  # (N,) uint8

    def decode(self, ids) -> str:
        return byte_tokens.decode(ids)

    def token_bytes(self) -> np.ndarray:
        """(V,) int64: the UTF-8 bytes each token stands for."""
        return np.ones(self.vocab_size, dtype=np.int64)

    def save(self, folder: Path) -> None:
        """Nothing to save: the byte tokenizer is built in."""

    def fingerprint(self) -> str:
        return "bytes"


@dataclass
class HFTokenizer:
    """A ``tokenizers.Tokenizer``; ``spec`` is what a run records (``bpe:N`` or the file it came from)."""

    tokenizer: object
    spec: str

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> np.ndarray:
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return np.asarray(ids, dtype=token_dtype(self.vocab_size))  # (N,)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        dtype = token_dtype(self.vocab_size)
        return [np.asarray(e.ids, dtype=dtype) for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def token_bytes(self) -> np.ndarray:
        """(V,) int64: the UTF-8 bytes each token stands for. Exact for byte-level tokenizers (each
        character of a token's string is one byte, GPT-2's byte-to-unicode table); otherwise the
        length of the token decoded on its own."""
        to_byte = {char: byte for byte, char in bytes_to_unicode().items()}
        lengths = np.zeros(self.vocab_size, dtype=np.int64)
        for token, index in self.tokenizer.get_vocab(with_added_tokens=True).items():
            if all(char in to_byte for char in token):
                lengths[index] = len(token)
            else:
                lengths[index] = len(self.tokenizer.decode([index]).encode("utf-8"))
        return lengths

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(str(folder / TOKENIZER_FILE))

    def fingerprint(self) -> str:
        import hashlib

        return hashlib.sha256(self.tokenizer.to_str().encode()).hexdigest()[:16]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 bytes to printable characters (Radford et al., 2019):
    printable Latin-1 bytes map to themselves, the rest to code points from 256 up."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


def parse_spec(spec: str) -> tuple[str, int | None]:
    """``bytes`` -> ("bytes", None); ``bpe:N`` -> ("bpe", N); anything else -> ("file", None)."""
    if spec == "bytes":
        return "bytes", None
    if spec.startswith("bpe:"):
        try:
            size = int(spec[4:])
        except ValueError:
            raise PoscliError(
                f"--tokenizer {spec!r}: give the vocabulary size as a whole number, e.g. --tokenizer bpe:4096"
            ) from None
        if not MIN_BPE_VOCAB <= size <= 1 << 20:
            raise PoscliError(
                f"--tokenizer {spec!r}: the vocabulary must be between {MIN_BPE_VOCAB} and {1 << 20}, e.g. --tokenizer "
                "bpe:4096"
            )
        return "bpe", size
    return "file", None


def train_bpe(texts: Iterable[str], vocab_size: int) -> HFTokenizer:
    """A byte-level BPE of ``vocab_size`` tokens trained on ``texts``: the 256 bytes, then merges
    learned from the texts (pre-tokenised as GPT-2 does, digits split one by one first)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return HFTokenizer(tokenizer, f"bpe:{vocab_size}")


def load_file(path: str | Path) -> HFTokenizer:
    """An existing ``tokenizer.json`` (or a folder that holds one)."""
    from tokenizers import Tokenizer

    path = Path(path).expanduser()
    if path.is_dir():
        path = path / TOKENIZER_FILE
    if not path.is_file():
        raise PoscliError(
            f"--tokenizer {str(path)!r}: no such file; use bytes, bpe:N (e.g. bpe:4096) or the path of a tokenizer.json"
        )
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as error:  # the library raises its own exception type for a malformed file
        raise PoscliError(
            f"--tokenizer {str(path)!r} is not a tokenizer.json the tokenizers library reads "
            f"({str(error).splitlines()[0]})"
        ) from None
    return HFTokenizer(tokenizer, str(path.resolve()))


def run_tokenizer(config_spec: str, run_folder: Path):
    """The tokenizer a run was trained with: bytes, or the tokenizer.json saved in its folder."""
    if config_spec == "bytes":
        return ByteTokenizer()
    saved = run_folder / TOKENIZER_FILE
    if not saved.exists():
        raise PoscliError(
            f"run {run_folder.name!r} was trained with --tokenizer {config_spec} but its {TOKENIZER_FILE} is missing"
        )
    loaded = load_file(saved)
    loaded.spec = config_spec
    return loaded


def describe(tokenizer) -> dict:
    """What a run records about its tokenizer."""
    return {"spec": tokenizer.spec, "vocab_size": tokenizer.vocab_size, "fingerprint": tokenizer.fingerprint()}


def loads(text: str) -> HFTokenizer:
    """A tokenizer from a tokenizer.json's text (tests, caches)."""
    from tokenizers import Tokenizer

    data = json.loads(text)
    return HFTokenizer(Tokenizer.from_str(json.dumps(data)), "file")
