"""The journal's group writer thread, in C and in Python: the same contract, on real files.

Each test runs with both writers (broker/store/_group_write.c and
broker/store/group_writer.ThreadGroupWriter); the eventfd is real, and the test waits on it
with a deadline, as the event loop does.
"""

from __future__ import annotations

import errno
import os
import select
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.store import group_writer as module
from broker.store.group_writer import GroupWriter, group_writer
from tests.store.small_disk import small_disk
from tests.store.test_native_walk import can_compile

HEADER = b"HEADER--"


@pytest.fixture(params=["native", "python"])
def writer(request: pytest.FixtureRequest) -> Iterator[tuple[GroupWriter, int]]:
    if request.param == "native" and not module.NATIVE:
        pytest.skip("broker/store/_group_write.c is not built (no C compiler)")
    done_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    made = group_writer(done_fd, native=request.param == "native")
    try:
        yield made, done_fd
    finally:
        made.close()
        os.close(done_fd)


def wait_done(writer: GroupWriter, done_fd: int, number: int) -> list[tuple[int, int]]:
    """Wait (eventfd, deadline) until flush ``number`` is done; the errors seen on the way."""
    errors: list[tuple[int, int]] = []
    deadline = time.monotonic() + 10
    upto = 0
    while upto < number:
        left = deadline - time.monotonic()
        assert left > 0, f"flush {number} not done (done up to {upto})"
        select.select([done_fd], [], [], left)
        try:
            os.eventfd_read(done_fd)
        except BlockingIOError:
            continue
        got, failed = writer.take_done()
        upto = max(upto, got)
        errors.extend(failed)
    return errors


def test_the_native_writer_is_built_where_it_can_be() -> None:
    """`pip install -e .` compiles it where a C compiler and Python's headers are."""
    if can_compile():
        assert module.NATIVE, "broker/store/_group_write.c is not built: pip install -e ."


def test_jobs_are_written_in_order_and_a_flush_is_done_with_its_last_job(
    writer: tuple[GroupWriter, int], tmp_path: Path
) -> None:
    made, done_fd = writer
    fds = [os.open(tmp_path / f"{i}.seg", os.O_WRONLY | os.O_CREAT | os.O_APPEND) for i in (1, 2)]
    try:
        made.submit(1, fds[0], bytearray(b"a1"), True, -1, None, False)
        made.submit(1, fds[0], b"a2", True, -1, None, False)
        made.submit(1, fds[1], memoryview(b"b1"), True, -1, None, True)
        made.submit(2, fds[1], b"b2", True)
        assert wait_done(made, done_fd, 2) == []
        assert (tmp_path / "1.seg").read_bytes() == b"a1a2"
        assert (tmp_path / "2.seg").read_bytes() == b"b1b2"
        assert made.bytes_written == 8
        assert made.syncs >= 2  # each file before the next one, and the last one
    finally:
        for fd in fds:
            os.close(fd)


def test_the_header_goes_first_only_into_an_empty_file(
    writer: tuple[GroupWriter, int], tmp_path: Path
) -> None:
    made, done_fd = writer
    fd = os.open(tmp_path / "s", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        made.submit(1, fd, b"r1", True, -1, HEADER)
        made.submit(2, fd, b"r2", False, -1, HEADER)
        made.submit(3, fd, None, True)  # a sync only
        assert wait_done(made, done_fd, 3) == []
        assert (tmp_path / "s").read_bytes() == HEADER + b"r1r2"
    finally:
        os.close(fd)


def test_a_new_segments_directory_is_synced(
    writer: tuple[GroupWriter, int], tmp_path: Path
) -> None:
    made, done_fd = writer
    fd = os.open(tmp_path / "s", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    dir_fd = os.open(tmp_path, os.O_RDONLY)
    try:
        made.submit(1, fd, b"r", True, dir_fd)
        assert wait_done(made, done_fd, 1) == []
        made.submit(2, fd, b"s", True, 9999)  # a directory that is not open: the job fails
        assert wait_done(made, done_fd, 2) == [(2, errno.EBADF)]
    finally:
        os.close(fd)
        os.close(dir_fd)


def test_a_failed_job_is_reported_and_the_next_one_still_written(
    writer: tuple[GroupWriter, int], tmp_path: Path
) -> None:
    made, done_fd = writer
    read_only = os.open(tmp_path / "ro", os.O_RDONLY | os.O_CREAT)
    fd = os.open(tmp_path / "s", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        made.submit(1, read_only, b"lost", True)
        made.submit(2, fd, b"kept", True)
        assert wait_done(made, done_fd, 2) == [(1, errno.EBADF)]
        assert (tmp_path / "s").read_bytes() == b"kept"
    finally:
        os.close(read_only)
        os.close(fd)


def test_a_write_that_finds_the_disk_full_leaves_the_file_at_a_boundary(
    writer: tuple[GroupWriter, int], tmp_path: Path
) -> None:
    made, done_fd = writer
    with small_disk(tmp_path, "1m") as disk:
        fd = os.open(disk / "s", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            made.submit(1, fd, b"first", True)
            made.submit(2, fd, b"x" * (2 << 20), True)  # more than the disk holds
            assert wait_done(made, done_fd, 2) == [(2, errno.ENOSPC)]
            assert (disk / "s").read_bytes() == b"first"  # the partial write was cut off
            made.submit(3, fd, b"next", True)
            assert wait_done(made, done_fd, 3) == []
            assert (disk / "s").read_bytes() == b"firstnext"
        finally:
            os.close(fd)


def test_close_finishes_every_job_submitted(
    writer: tuple[GroupWriter, int], tmp_path: Path
) -> None:
    made, _done_fd = writer
    fd = os.open(tmp_path / "s", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for number in range(1, 201):
            made.submit(number, fd, b"%d," % number, number % 2 == 0)
        made.close()
        assert (tmp_path / "s").read_bytes() == b"".join(b"%d," % n for n in range(1, 201))
        with pytest.raises(RuntimeError):
            made.submit(201, fd, b"late", True)
    finally:
        os.close(fd)
