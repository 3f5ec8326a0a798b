"""Where the tests find the repository and their corpora (whatever folder a test file is in)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
CORPUS = TESTS / "corpus"
