"""Seq reservations (snapshotd/seqmarks.py): a seq is durable as handed out before it is used;
after a reboot the next seq is at least the mark, within a boot and after a clean stop the
numbering goes on without a skip."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapshotd.core.keys import AttemptKey
from snapshotd.service.seqmarks import SeqMarks

KEY = AttemptKey("run", "node", 0, 1)


def test_a_block_is_reserved_durably_before_a_seq_is_used(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNAPSHOTD_BOOT_ID", "boot-1")
    marks = SeqMarks(tmp_path, block=4)
    assert marks.floor(KEY) == 0
    for seq in range(6):
        marks.reserve(KEY, seq)
    (mark,) = (tmp_path / "seqmarks").iterdir()
    assert mark.read_text() == "run/node/0/1\n8\nboot-1\n"  # 0..3 reserved, then 4..7
    # A power cut (a reboot) after seq 5: the ledger may have lost 1..5; none comes back.
    monkeypatch.setenv("SNAPSHOTD_BOOT_ID", "boot-2")
    assert SeqMarks(tmp_path, block=4).floor(KEY) == 8
    # A crash without a reboot: the page cache kept the ledger whole, no skip.
    monkeypatch.setenv("SNAPSHOTD_BOOT_ID", "boot-1")
    assert SeqMarks(tmp_path, block=4).floor(KEY) == 0


def test_a_clean_stop_writes_the_exact_next_seq(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNAPSHOTD_BOOT_ID", "boot-1")
    marks = SeqMarks(tmp_path)
    marks.reserve(KEY, 0)
    marks.reserve(KEY, 1)
    marks.close()
    monkeypatch.setenv("SNAPSHOTD_BOOT_ID", "boot-2")
    assert SeqMarks(tmp_path).floor(KEY) == 2


def test_a_damaged_mark_refuses_rather_than_guesses(tmp_path: Path) -> None:
    marks = SeqMarks(tmp_path)
    marks.reserve(KEY, 0)
    (mark,) = (tmp_path / "seqmarks").iterdir()
    mark.write_text("")
    with pytest.raises(OSError, match="damaged"):
        SeqMarks(tmp_path).floor(KEY)
