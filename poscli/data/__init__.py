"""Corpora, tokenizers and the passkey prompts: text in, token streams and held-out splits out."""
