"""A full disk under the spill and ``.npy`` writers is named as a full disk, with the file.

``ndarray.tofile`` and ``np.save`` write through C ``fwrite`` and report a full disk as
``OSError: N requested and M written`` (no errno, no file), which read as "fix the
cause". The project's writers (:func:`asepr.storage.inputs.npy.write_array`, :func:`asepr.storage.inputs.npy.save_npy`
and everything built on them) report ``ENOSPC`` and the file's path instead.
"""

from __future__ import annotations

import errno

import numpy as np
import pytest

from asepr.pipeline.store.route import SegmentWriter
from asepr.storage.commit.atomic import save_npy_atomic
from asepr.storage.errors import FileSystemError, os_errors_as_problems
from asepr.storage.inputs.npy import save_npy, write_array
from tests.security.tmpfs import fill, mounted_tmpfs

BIG = np.arange(1 << 17, dtype=np.int64)  # 1 MiB, more than the full disk has left


@pytest.fixture
def full_disk(tmp_path):
    with mounted_tmpfs(tmp_path / "disk", "2m") as disk:
        fill(disk, keep=64 << 10)
        yield disk


def test_write_array_names_the_full_disk_and_the_file(full_disk):
    path = full_disk / "rows.bin"
    with pytest.raises(OSError) as info, open(path, "wb") as fh:
        write_array(fh, BIG)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)


@pytest.mark.parametrize("save", [save_npy, save_npy_atomic], ids=["save_npy", "save_npy_atomic"])
def test_npy_files_on_a_full_disk_raise_enospc_with_the_path(full_disk, save):
    path = full_disk / "master.npy"
    with pytest.raises(OSError) as info:
        save(path, BIG)
    assert info.value.errno == errno.ENOSPC
    assert str(full_disk) in str(info.value.filename)


def test_a_spill_on_a_full_disk_is_reported_as_a_full_disk(full_disk):
    writer = SegmentWriter(full_disk / "edges.bin", full_disk / "edges.idx.npy")
    with pytest.raises(FileSystemError) as info, os_errors_as_problems():
        try:
            for part in range(4):
                writer.write(part, 0, BIG)
        finally:
            writer.abort()
    message = str(info.value)
    assert "the disk full" in message and "ENOSPC" in message and str(full_disk / "edges.bin") in message
    assert "requested and" not in message
