"""The ``asepr`` command line: orchestration only, no algorithms."""

__all__: list[str] = []
