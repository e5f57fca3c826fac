"""Recipes, seed summaries, comparisons with published results, the report."""
