"""Node agent: which part of a container log file ``kubectl logs`` gets."""

from __future__ import annotations

from sluice_dev.nodeagent.kubeletapi import instance_log, tail_lines

LOG = (
    b"--- t0 start (restart 0): [..]\nfirst run 1\nfirst run 2\n--- t1 start (restart 1): [..]\nsecond run\n"
)


def test_current_and_previous_instance() -> None:
    assert instance_log(LOG, previous=False) == b"second run\n"
    assert instance_log(LOG, previous=True) == b"first run 1\nfirst run 2\n"
    single = b"--- t0 start\nonly\n"
    assert instance_log(single, previous=False) == b"only\n"
    assert instance_log(single, previous=True) == b""
    assert instance_log(b"", previous=False) == b""


def test_tail_lines() -> None:
    data = b"a\nb\nc\n"
    assert tail_lines(data, None) == data
    assert tail_lines(data, 2) == b"b\nc\n"
    assert tail_lines(data, 0) == b""
    assert tail_lines(data, 10) == data
