"""Progress of the long steps, as a user sees it: a bar on a terminal, lines in a log,
nothing under ``-q`` or ``--no-progress``.

The terminal is a real pseudo-terminal (``os.openpty``) with a window size, and the
command a real ``asepr`` process on it, so ``isatty`` and the bar's drawing are the ones a
user meets.
"""

from __future__ import annotations

import fcntl
import io
import os
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from asepr.storage.progress import advance, expect, reporting, track
from asepr.workflows.demo import bundled_cora
from asepr.workflows.progress import LineBar

REPO = Path(__file__).resolve().parents[2]
BAR = re.compile(r"\d+%\|")


def _on_terminal(*args: str, cwd: Path) -> tuple[int, str]:
    """Run ``asepr ARGS`` with stdin, stdout and stderr on a pseudo-terminal of 100
    columns; its exit status and everything it wrote."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "asepr", *args], stdin=slave, stdout=slave, stderr=slave,
                            cwd=cwd, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            chunks.append(chunk)
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=60), b"".join(chunks).decode(errors="replace")


def test_import_draws_a_bar_on_a_terminal(tmp_path):
    code, text = _on_terminal("import", "gnn-npz", str(bundled_cora()), "cora", cwd=tmp_path)
    assert code == 0, text
    assert BAR.search(text), text
    assert "import gnn-npz" in text and "imported cora" in text


def test_quiet_prints_nothing_but_errors(tmp_path):
    code, text = _on_terminal("import", "gnn-npz", str(bundled_cora()), "cora", "-q", cwd=tmp_path)
    assert code == 0 and text.strip() == "", text
    assert (tmp_path / "cora" / "meta.json").exists()
    # The same command again is refused (the output exists): one error line, nothing else.
    code, text = _on_terminal("import", "gnn-npz", str(bundled_cora()), "cora", "-q", cwd=tmp_path)
    lines = text.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("asepr import: error:"), text


def test_no_progress_keeps_the_summary_and_drops_the_bar(tmp_path):
    code, text = _on_terminal("import", "gnn-npz", str(bundled_cora()), "cora", "--no-progress", cwd=tmp_path)
    assert code == 0 and not BAR.search(text), text
    assert text.strip().startswith("imported cora")


@pytest.mark.slow  # three commands, one of them a partition run
def test_partition_stages_draw_bars_and_validate_too(tmp_path):
    code, text = _on_terminal("import", "gnn-npz", str(bundled_cora()), "cora", "-q", cwd=tmp_path)
    assert code == 0, text
    code, text = _on_terminal("partition", "cora", "parts", "-k", "2", "--workers", "0", cwd=tmp_path)
    assert code == 0, text
    for stage in ("validate", "assignment", "finalize edges"):
        assert re.search(rf"{stage}: +\d+%\|", text), (stage, text)
    code, text = _on_terminal("validate", "cora", "-q", cwd=tmp_path)
    assert code == 0 and text.strip() == "", text


def test_off_a_terminal_a_long_stage_prints_a_line_per_interval():
    out = io.StringIO()
    with reporting(lambda name: LineBar("asepr partition", name, interval=0.0, stream=out)), track("assignment"):
        expect(4_000)
        advance(1_000)
        with track("state"):  # a nested stage counts into its own line
            advance(7)
        advance(1_000)
    lines = out.getvalue().splitlines()
    assert lines == ["asepr partition: assignment: 1,000 of 4,000 (25%) after 0 s",
                     "asepr partition: state: 7 after 0 s",
                     "asepr partition: assignment: 2,000 of 4,000 (50%) after 0 s"]
    # Without a reporter (a library caller) nothing is drawn and nothing fails.
    with track("assignment"):
        advance(5)
