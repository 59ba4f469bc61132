"""``python -m asepr``: the ``asepr`` command line."""

from asepr.workflows.cli import run

run()
