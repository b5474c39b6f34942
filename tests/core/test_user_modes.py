"""``core.user_modes``: a request's ``umask`` is checked, and this process's umask is read
without being changed (the git oracle for the modes themselves is in
tests/features/review/test_export_modes.py and tests/features/restore/test_restore_modes.py)."""

from __future__ import annotations

import os

import pytest

from snapshotd.core import DEFAULT_UMASK, ServiceError, process_umask, umask_field


@pytest.mark.parametrize("value", ["022", 0o1000, -1, True, 2.5])
def test_a_bad_umask_is_a_clear_bad_request(value: object) -> None:
    with pytest.raises(ServiceError) as caught:
        umask_field({"umask": value})
    assert caught.value.code == "bad-request" and "umask" in caught.value.message


def test_umask_field_defaults_and_passes_a_good_value() -> None:
    assert umask_field({}) == umask_field({"umask": None}) == DEFAULT_UMASK
    assert umask_field({"umask": 0o027}) == 0o027


def test_process_umask_reads_without_changing() -> None:
    old = os.umask(0o027)
    try:
        assert process_umask() == 0o027
        assert process_umask() == 0o027  # read twice: nothing changed it
    finally:
        os.umask(old)
