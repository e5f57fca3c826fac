"""Export to transformers."""
