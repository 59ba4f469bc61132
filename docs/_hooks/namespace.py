"""mkdocs hook: the API reference reads the package as it installs, ``asepr.<room>``.

``pyproject.toml`` maps the repository's folders into one namespace (``api/`` is
``asepr``, ``pipeline/`` is ``asepr.pipeline``, ...). mkdocstrings' static analysis
(griffe) looks for a folder named ``asepr`` holding its subpackages, which neither the
checkout nor an editable install has. Before the build this hook lays that folder out
as symbolic links into the checkout, in a temporary directory, and points the Python
handler's ``paths`` at it.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from mkdocs.plugins import event_priority

from asepr.workflows.bench.code import namespace_view


@event_priority(100)  # before mkdocstrings' own on_config creates the handler
def on_config(config):
    root = Path(config.config_file_path).resolve().parent
    tree = Path(tempfile.mkdtemp(prefix="asepr-docs-"))
    atexit.register(shutil.rmtree, tree, ignore_errors=True)
    view = namespace_view(root, tree)
    handlers = config.plugins["mkdocstrings"].config.handlers
    handlers.setdefault("python", {})["paths"] = [str(view)]
    return config
