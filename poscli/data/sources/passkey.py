"""``--data passkey``: synthetic documents for held-out perplexity of passkey-trained models
(lengths log-uniform in 128..64k, the compact template; ``poscli.data.passkey``)."""

from __future__ import annotations

from poscli.data.sources import register
from poscli.data.sources.base import Source

DOCUMENTS_VERSION = 2  # part of the cache key: raise it when these documents change


@register("passkey")
class PasskeyDocuments(Source):
    summary = "synthetic passkey documents (the compact template), for held-out perplexity"
    form = "'passkey'"
    priority = 0
    named = True

    @classmethod
    def matches(cls, spec: str) -> bool:
        return spec == "passkey"

    def documents(self, chunk_bytes: int | None = None) -> list[str]:
        from poscli.data.passkey import synthetic_documents  # numpy: not when --help lists the sources

        return synthetic_documents()

    def cache_key(self) -> list:
        return ["passkey", "named-keys", DOCUMENTS_VERSION]
