"""What this machine has free for a run: available memory (a cgroup limit included) and disk."""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["free_disk_bytes", "free_memory_bytes"]


def _existing(path: str | Path) -> Path:
    """``path`` or its nearest existing ancestor (an output directory may not exist yet)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_disk_bytes(path: str | Path) -> int:
    """Free bytes (for an unprivileged writer) on the filesystem that holds ``path``."""
    return int(shutil.disk_usage(_existing(path)).free)


def _cgroup_free() -> int | None:
    """What the cgroup (v2) memory limit leaves, when one is set."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        return max(0, int(limit) - used)
    except (OSError, ValueError):
        return None


def free_memory_bytes() -> int:
    """Memory available to a new run: the kernel's ``MemAvailable``, capped by a cgroup limit."""
    import psutil

    available = int(psutil.virtual_memory().available)
    limit = _cgroup_free()
    return available if limit is None else min(available, limit)
