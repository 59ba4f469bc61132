"""Inputs that the pipeline makes: the synthetic generator and the stream shuffle."""
