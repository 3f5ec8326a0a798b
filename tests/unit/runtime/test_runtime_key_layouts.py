"""The pure parts of the runtime's Kafka primitive keys (``sluice_runtime.keys``): the lengths of
Kafka's serializers' primitives and the text of a UUID as ``UUIDSerializer`` writes it. The bytes
themselves are read and written by Spark: tests/integration/test_runtime_key_formats.py."""

from __future__ import annotations

import re
import struct
import uuid

import pytest
from sluice.core.spec import PRIMITIVE_KEY_TYPES
from sluice_runtime import keys


def test_the_lengths_of_kafkas_primitives() -> None:
    # LongSerializer, IntegerSerializer, ShortSerializer, DoubleSerializer, FloatSerializer: big-endian
    assert keys.PRIMITIVE_LENGTHS == {"kafka:long": struct.calcsize(">q"), "kafka:int": struct.calcsize(">i"),
                                      "kafka:short": struct.calcsize(">h"),
                                      "kafka:double": struct.calcsize(">d"),
                                      "kafka:float": struct.calcsize(">f")}
    assert set(keys.PRIMITIVE_LENGTHS) < set(PRIMITIVE_KEY_TYPES)


def _is_uuid(text: str) -> bool:
    """The runtime's test (``keys._is_uuid``, in Spark: ``length`` and ``rlike``, Java's regex, whose
    ``^``/``$`` and classes behave as Python's here)."""
    return len(text) == keys.UUID_LENGTH and re.search(keys.UUID_PATTERN, text) is not None


@pytest.mark.parametrize("text", [str(uuid.UUID(int=0)), str(uuid.UUID(int=2**128 - 1)),
                                  "123e4567-e89b-12d3-a456-426614174000",
                                  "123E4567-E89B-12D3-A456-426614174000"])
def test_a_uuids_text(text: str) -> None:
    assert _is_uuid(text)
    assert str(uuid.UUID(text)) == text.lower()  # what the source reads: UUID.toString()


@pytest.mark.parametrize("text", ["", "abc", "123e4567e89b12d3a456426614174000",
                                  "{123e4567-e89b-12d3-a456-426614174000}",
                                  "123e4567-e89b-12d3-a456-42661417400g",
                                  "123e4567-e89b-12d3-a456-4266141740000",
                                  " 123e4567-e89b-12d3-a456-426614174000",
                                  "123e4567-e89b-12d3-a456-426614174000\n"])
def test_not_a_uuids_text(text: str) -> None:
    assert not _is_uuid(text)
