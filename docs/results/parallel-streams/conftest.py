"""Fixtures of the simulation's checks: the project's shared test graphs."""

from tests.conftest import rng  # noqa: F401
from tests.pipeline.conftest import inputs  # noqa: F401
