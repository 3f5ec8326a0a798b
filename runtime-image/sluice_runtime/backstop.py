"""Read a checkpoint's own description and check it against a plan before an in-place restart.

``verify(checkpoint, plan)`` returns the problems found by :func:`sluice.core.classify.backstop.check`
([] when the restart is safe as far as the checkpoint can tell); ``record(checkpoint, plan)`` writes
the plan's state signature to ``<checkpoint>/sluice/state.json`` when a checkpoint is first used
(by create-and-rename, as Spark writes its own files: a checkpoint epoch shares its files with the
epoch it was linked from by hard links, so a file is never rewritten in place).
Only plain files are read (local or mounted volume paths).

A recorded signature of another version than this runtime's
(:data:`sluice.core.classify.backstop.SIGNATURE_VERSION`, recorded in the file), or one that cannot
be read, is not compared: :func:`verify` checks the checkpoint as one without a signature and logs
it. The plan and engine it names (:func:`recorded_plan`, :func:`recorded_engine`) are read from any
version.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from sluice.core.classify.backstop import (
    SIGNATURE_VERSION,
    CheckpointFacts,
    StateOperator,
    check,
    comparable,
    state_signature,
)
from sluice.core.plan.model import Plan

log = logging.getLogger(__name__)

SIGNATURE_FILE = Path("sluice") / "state.json"


def _latest_offsets(root: Path) -> Path | None:
    offsets = root / "offsets"
    if not offsets.is_dir():
        return None
    batches = [p for p in offsets.iterdir() if p.name.isdigit()]
    return max(batches, key=lambda p: int(p.name)) if batches else None


def read_facts(checkpoint: str | Path) -> CheckpointFacts:
    root = Path(checkpoint)
    facts = CheckpointFacts()
    latest = _latest_offsets(root)
    if latest is not None:
        lines = latest.read_text(encoding="utf-8").splitlines()
        if len(lines) > 1:
            meta: dict[str, Any] = json.loads(lines[1])
            facts.conf = {str(k): str(v) for k, v in (meta.get("conf") or {}).items()}
    state = root / "state"
    if state.is_dir():
        for op_dir in sorted((p for p in state.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
            meta_file = op_dir / "_metadata" / "metadata"
            name, stores = "unknown", []
            if meta_file.is_file():
                lines = meta_file.read_text(encoding="utf-8").splitlines()
                if len(lines) > 1:
                    info = json.loads(lines[1])
                    name = info.get("operatorInfo", {}).get("operatorName", "unknown")
                    stores = [s.get("storeName", "") for s in info.get("stateStoreInfo", [])]
            facts.operators.append(StateOperator(operator_id=int(op_dir.name), name=name, stores=stores))
    if (root / SIGNATURE_FILE).is_file():
        facts.signature = _signature(root)
        if facts.signature is None:
            log.warning("checkpoint %s: its state signature cannot be read: not compared", root)
    return facts


def _signature(checkpoint: str | Path) -> dict[str, Any] | None:
    """The recorded signature, of any version (None: none, or not a JSON object)."""
    try:
        data = json.loads((Path(checkpoint) / SIGNATURE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def has_signature(checkpoint: str | Path) -> bool:
    """Whether the checkpoint records a state signature this runtime compares (of its version)."""
    return comparable(_signature(checkpoint))


def _recorded(checkpoint: str | Path, key: str) -> str | None:
    data = _signature(checkpoint)
    return None if data is None else str(data.get(key) or "") or None


def recorded_plan(checkpoint: str | Path) -> str | None:
    """The hash of the plan whose signature the checkpoint records (the last plan that started on
    it after a switch), None when it records none."""
    return _recorded(checkpoint, "planHash")


def recorded_engine(checkpoint: str | Path) -> str | None:
    """The engine digest the checkpoint's signature records (the engine of the last switch), if any."""
    return _recorded(checkpoint, "engine")


def record(checkpoint: str | Path, plan: Plan, engine: str = "") -> None:
    """Write the plan's state signature (and the engine it starts on, when known) into the epoch."""
    path = Path(checkpoint) / SIGNATURE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp")
    signature = {**state_signature(plan), **({"engine": engine} if engine else {})}
    staging.write_text(json.dumps(signature, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(staging, path)  # a new inode: the epoch this one was linked from keeps its own


def verify(checkpoint: str | Path, plan: Plan) -> list[str]:
    facts = read_facts(checkpoint)
    if facts.signature is not None and not comparable(facts.signature):
        log.warning("checkpoint %s: its state signature is of version %r, this runtime compares "
                    "version %s: the state's meaning is not compared (checked as a checkpoint "
                    "without a signature)", checkpoint, facts.signature.get("version"), SIGNATURE_VERSION)
    return check(plan, facts)
