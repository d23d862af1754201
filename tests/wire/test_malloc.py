"""The malloc tuning the bridge applies: taken by glibc, once, harmless to repeat."""

from __future__ import annotations

import platform

import pytest

from wire._malloc import tune_malloc


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_takes_the_thresholds_and_a_second_call_is_a_no_op() -> None:
    assert tune_malloc() is True
    assert tune_malloc() is True
    big = [bytes(2**20) for _ in range(8)]  # MiB blocks still allocate and free
    assert sum(len(block) for block in big) == 8 * 2**20
