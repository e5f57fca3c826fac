"""Perplexity against length, passkey retrieval, the 3-gram reference, statistics, tables and plots."""
