"""The GPT and its saved form (run folders, checkpoints, weights)."""
