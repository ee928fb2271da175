"""broker.ha.epoch: the highest fencing epoch seen, durable in ``<data-dir>/ha-epoch``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.epoch import EPOCH_FILE, MAX_EPOCH, EpochError, EpochStore


def epoch_file(directory: Path) -> Path:
    return directory / EPOCH_FILE


# -- starting out -------------------------------------------------------------------


def test_starts_at_zero_without_a_file(tmp_path: Path) -> None:
    store = EpochStore(tmp_path)
    assert store.path == tmp_path / "ha-epoch"
    assert store.load() == 0
    assert store.current == 0
    assert not epoch_file(tmp_path).exists()  # reading creates nothing


def test_a_missing_data_dir_reads_as_zero(tmp_path: Path) -> None:
    assert EpochStore(tmp_path / "not" / "yet").load() == 0


def test_construction_does_no_io(tmp_path: Path) -> None:
    epoch_file(tmp_path).write_text("garbage\n")
    store = EpochStore(str(tmp_path))  # a str works too
    with pytest.raises(EpochError):
        store.load()


# -- observing ----------------------------------------------------------------------


def test_observe_raises_only(tmp_path: Path) -> None:
    store = EpochStore(tmp_path)
    assert store.observe(0) is False  # not higher than the starting 0
    assert store.observe(3) is True
    assert store.current == 3
    assert store.observe(3) is False
    assert store.observe(2) is False
    assert store.current == 3
    assert store.observe(10) is True
    assert store.current == 10
    assert epoch_file(tmp_path).read_text() == "10\n"


def test_persists_across_instances(tmp_path: Path) -> None:
    first = EpochStore(tmp_path)
    first.load()
    assert first.observe(7)
    second = EpochStore(tmp_path)
    assert second.load() == 7
    assert second.observe(5) is False
    assert second.observe(8) is True
    assert EpochStore(tmp_path).current == 8


def test_a_fresh_instance_never_lowers_the_file(tmp_path: Path) -> None:
    EpochStore(tmp_path).observe(9)
    late = EpochStore(tmp_path)  # observe without load: the file is read first
    assert late.observe(4) is False
    assert late.current == 9
    assert epoch_file(tmp_path).read_text() == "9\n"


def test_observe_creates_the_data_dir(tmp_path: Path) -> None:
    directory = tmp_path / "data" / "qpidd"
    assert EpochStore(directory).observe(1)
    assert epoch_file(directory).read_text() == "1\n"


def test_no_temporary_files_are_left(tmp_path: Path) -> None:
    store = EpochStore(tmp_path)
    for epoch in (1, 2, 5, 3, 8):
        store.observe(epoch)
    assert sorted(os.listdir(tmp_path)) == ["ha-epoch"]


def test_the_file_is_replaced_by_rename(tmp_path: Path) -> None:
    store = EpochStore(tmp_path)
    store.observe(1)
    before = os.stat(epoch_file(tmp_path)).st_ino
    store.observe(2)
    assert os.stat(epoch_file(tmp_path)).st_ino != before  # a new file, not rewritten in place


@pytest.mark.parametrize("epoch", [-1, -(2**70), MAX_EPOCH + 1])
def test_out_of_range_epochs_are_refused(tmp_path: Path, epoch: int) -> None:
    store = EpochStore(tmp_path)
    with pytest.raises(ValueError, match=f"invalid epoch {epoch}"):
        store.observe(epoch)
    assert store.current == 0
    assert not epoch_file(tmp_path).exists()


@pytest.mark.parametrize("epoch", [1.0, "3", True, None])
def test_non_integers_are_refused(tmp_path: Path, epoch: object) -> None:
    with pytest.raises(TypeError, match="epoch must be an int"):
        EpochStore(tmp_path).observe(epoch)  # type: ignore[arg-type]


def test_the_largest_epoch_round_trips(tmp_path: Path) -> None:
    assert EpochStore(tmp_path).observe(MAX_EPOCH)
    assert EpochStore(tmp_path).load() == MAX_EPOCH == 2**63 - 1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=MAX_EPOCH), max_size=12))
def test_any_sequence_leaves_the_maximum(
    tmp_path_factory: pytest.TempPathFactory, epochs: list[int]
) -> None:
    directory = tmp_path_factory.mktemp("epoch")
    store = EpochStore(directory)
    memory = EpochStore(None)
    highest = 0
    for epoch in epochs:
        raised = store.observe(epoch)
        assert raised == (epoch > highest)
        assert memory.observe(epoch) == raised
        highest = max(highest, epoch)
        assert store.current == highest == memory.current
    assert EpochStore(directory).load() == highest
    assert (not epoch_file(directory).exists()) == (highest == 0)


# -- a broken file ------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"", b"\n", b"abc\n", b"-3\n", b"1.5\n", b"1 2\n", b"0x10\n", b"\xff\xfe", b"9" * 20 + b"\n"],
)
def test_garbage_is_an_error_naming_the_file(tmp_path: Path, content: bytes) -> None:
    epoch_file(tmp_path).write_bytes(content)
    store = EpochStore(tmp_path)
    with pytest.raises(EpochError) as info:
        store.load()
    assert str(epoch_file(tmp_path)) in str(info.value)
    assert "does not hold an epoch" in str(info.value)
    with pytest.raises(EpochError):
        store.observe(5)  # never overwrites what it could not read
    assert epoch_file(tmp_path).read_bytes() == content


def test_long_garbage_is_shortened(tmp_path: Path) -> None:
    epoch_file(tmp_path).write_bytes(b"x" * 1000)
    with pytest.raises(EpochError) as info:
        EpochStore(tmp_path).load()
    message = str(info.value)
    assert message.endswith("...")
    assert message.count("x") < 100  # the path may be long; the garbage is cut


@pytest.mark.parametrize("content", ["12", " 12 \n", "012\n"])
def test_whitespace_and_leading_zeros_are_read(tmp_path: Path, content: str) -> None:
    epoch_file(tmp_path).write_text(content)
    assert EpochStore(tmp_path).load() == 12


def test_an_unreadable_file_is_an_error(tmp_path: Path) -> None:
    epoch_file(tmp_path).mkdir()  # a directory where the file should be
    with pytest.raises(EpochError, match=r"cannot read HA epoch file .*ha-epoch"):
        EpochStore(tmp_path).load()


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_a_failed_rename_or_fsync_keeps_the_old_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    store = EpochStore(tmp_path)
    assert store.observe(2)

    def fail(*args: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(EpochError, match=r"cannot write HA epoch file .*: Input/output error"):
        store.observe(3)
    monkeypatch.undo()
    assert store.current == 2
    assert sorted(os.listdir(tmp_path)) == ["ha-epoch"]  # the temporary file is gone
    assert EpochStore(tmp_path).load() == 2
    assert store.observe(3)
    assert EpochStore(tmp_path).load() == 3


# -- without a data directory -------------------------------------------------------


def test_without_a_data_dir_the_epoch_is_in_memory_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = EpochStore(None)
    assert store.path is None
    assert store.current == 0
    assert store.load() == 0
    assert store.observe(4) is True
    assert store.observe(1) is False
    assert store.load() == 4  # loading again keeps what was seen
    assert store.current == 4
    assert os.listdir(tmp_path) == []
    assert EpochStore(None).current == 0  # nothing survives the instance
    assert "memory" in repr(store)
