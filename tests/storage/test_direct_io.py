"""Files written and read past the page cache (asepr.storage.locations.direct_io)."""

from __future__ import annotations

import fcntl
import os

import numpy as np
import pytest

from asepr.storage.locations.direct_io import ALIGN, DirectWriter, aligned_empty, open_direct, pread_into


def _pieces(rng, total):
    """Random cut points of ``total`` bytes: empty, tiny, unaligned and multi-block pieces."""
    if not total:
        return [np.arange(0)]
    cuts = np.sort(rng.integers(0, total, size=12))
    return np.split(np.arange(total), cuts)


@pytest.mark.parametrize("direct_wanted", [True, False])
@pytest.mark.parametrize("total", [0, 100, ALIGN, 3 * ALIGN + 17, 40_000])
def test_writer_writes_exactly_the_bytes_given(tmp_path, direct_wanted, total):
    # Whatever the pieces (empty, inside one block, across the buffer), the file holds
    # the bytes in order, its size is theirs (an unaligned tail included), and every
    # range reads back, past the end shorter, with or without O_DIRECT.
    rng = np.random.default_rng(total)
    data = rng.integers(0, 256, size=total, dtype=np.uint8)
    path = tmp_path / "f"
    if direct_wanted:
        fd, direct = open_direct(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    else:
        fd, direct = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), False
    writer = DirectWriter(fd, direct, buffer_bytes=2 * ALIGN)
    written = 0
    for piece in _pieces(rng, total):
        writer.write(data[piece])
        written += len(piece)
        assert writer.offset == written
    writer.close()
    os.close(fd)
    assert path.read_bytes() == data.tobytes()
    fd, _ = open_direct(path, os.O_RDONLY)
    try:
        scratch = aligned_empty(4 * ALIGN + 2 * ALIGN)
        for _ in range(20):
            start = int(rng.integers(0, total + 1))
            count = int(rng.integers(0, 4 * ALIGN))
            got = pread_into(fd, start, count, scratch)
            np.testing.assert_array_equal(got, data[start:start + count])
        np.testing.assert_array_equal(pread_into(fd, 0, total + 5 * ALIGN), data)  # a new buffer
    finally:
        os.close(fd)


def test_direct_flag_is_used_where_the_filesystem_takes_it(tmp_path):
    # open_direct asks for O_DIRECT and says whether it got it; an O_DIRECT writer must
    # start on a block, and its tail is written once the flag is cleared.
    fd, direct = open_direct(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        has_flag = bool(fcntl.fcntl(fd, fcntl.F_GETFL) & getattr(os, "O_DIRECT", 0))
        assert has_flag == direct
        if not direct:
            pytest.skip("this filesystem refuses O_DIRECT")
        with pytest.raises(ValueError, match="multiple of 4096"):
            DirectWriter(fd, True, start=10)
        writer = DirectWriter(fd, True, start=ALIGN)
        writer.write(np.arange(1000, dtype=np.int32))
        writer.close()
        assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT
    finally:
        os.close(fd)
    raw = (tmp_path / "f").read_bytes()
    assert raw[:ALIGN] == bytes(ALIGN) and raw[ALIGN:] == np.arange(1000, dtype=np.int32).tobytes()
    with pytest.raises(FileExistsError):
        open_direct(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    os.symlink(tmp_path / "f", tmp_path / "link")
    with pytest.raises(OSError):
        open_direct(tmp_path / "link", os.O_RDONLY)


def test_aligned_empty_is_aligned():
    assert len(aligned_empty(0)) == 0
    for nbytes in (1, ALIGN + 3, 1 << 20):
        array = aligned_empty(nbytes)
        assert len(array) == nbytes and array.ctypes.data % ALIGN == 0
