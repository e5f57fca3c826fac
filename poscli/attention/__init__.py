"""Attention kernels: blockwise exact attention with a score bias, distance tables, flex attention."""
