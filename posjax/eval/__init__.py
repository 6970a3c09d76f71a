"""Evaluation: length-extrapolation runs, plots, and analysis of position encodings."""
