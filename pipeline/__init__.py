"""Partitioning algorithms and their Dask stages (see DESIGN.md section 4)."""

__all__: list[str] = []
