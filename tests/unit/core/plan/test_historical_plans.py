"""Historical plans stay loadable: every committed plan loads, re-serializes unchanged, and its stored
hash still verifies. These files are frozen: never edit them; a model change that breaks one needs a
new step version instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sluice.core.plan.model import Plan

from tests.support import paths

HISTORICAL = sorted((paths.CORPUS / "historical_plans").glob("*.json"))
def _contains(new: Any, old: Any) -> bool:
    """``new`` keeps everything ``old`` stored (new optional fields may be added)."""
    if isinstance(old, dict):
        return isinstance(new, dict) and all(k in new and _contains(new[k], v) for k, v in old.items())
    if isinstance(old, list):
        return isinstance(new, list) and len(new) == len(old) and all(map(_contains, new, old))
    return bool(new == old)


@pytest.mark.parametrize("path", HISTORICAL, ids=[p.stem for p in HISTORICAL])
def test_historical_plan_loads_and_verifies(path: Path) -> None:
    raw = json.loads(path.read_text())
    plan = Plan.from_json(path.read_text())
    again = json.loads(plan.to_json())
    assert _contains(again, raw), "re-serializing the plan changed or dropped stored content"
    assert Plan.from_json(plan.to_json()) == plan
    assert plan.hash == raw["hash"]
    assert plan.compute_hash() == raw["hash"], "the stored hash no longer verifies"
