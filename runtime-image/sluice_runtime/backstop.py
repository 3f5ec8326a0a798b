"""Read a checkpoint's own description and check it against a plan before an in-place restart.

``verify(checkpoint, plan)`` returns the problems found by :func:`sluice.core.classify.backstop.check`
([] when the restart is safe as far as the checkpoint can tell); ``record(checkpoint, plan)`` writes
the plan's state signature to ``<checkpoint>/sluice/state.json`` when a checkpoint is first used
(by create-and-rename, as Spark writes its own files: a checkpoint epoch shares its files with the
epoch it was linked from by hard links, so a file is never rewritten in place).
Files are read through the checkpoint's store (:mod:`sluice_runtime.checkpointstore`: a volume
path, or an ``s3a://`` prefix).

A recorded signature of another version than this runtime's
(:data:`sluice.core.classify.backstop.SIGNATURE_VERSION`, recorded in the file), or one that cannot
be read, is not compared: :func:`verify` checks the checkpoint as one without a signature and logs
it. The plan and engine it names (:func:`recorded_plan`, :func:`recorded_engine`) are read from any
version.
"""

from __future__ import annotations

import json
import logging
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

from sluice_runtime import checkpointstore as cs

log = logging.getLogger(__name__)

SIGNATURE_FILE = Path("sluice") / "state.json"


def _latest_offsets(root: str | Path) -> str | None:
    batches = [int(n) for n in cs.store_for(root).names(cs.join(root, "offsets")) if n.isdigit()]
    return cs.join(root, "offsets", str(max(batches))) if batches else None


def read_facts(checkpoint: str | Path) -> CheckpointFacts:
    root, store = checkpoint, cs.store_for(checkpoint)
    facts = CheckpointFacts()
    latest = _latest_offsets(root)
    text = store.read(latest) if latest is not None else None
    if text is not None:
        lines = text.decode("utf-8").splitlines()
        if len(lines) > 1:
            meta: dict[str, Any] = json.loads(lines[1])
            facts.conf = {str(k): str(v) for k, v in (meta.get("conf") or {}).items()}
    for op in sorted(int(n) for n in store.names(cs.join(root, "state")) if n.isdigit()):
        data = store.read(cs.join(root, "state", str(op), "_metadata", "metadata"))
        name, stores = "unknown", []
        if data is not None:
            lines = data.decode("utf-8").splitlines()
            if len(lines) > 1:
                info = json.loads(lines[1])
                name = info.get("operatorInfo", {}).get("operatorName", "unknown")
                stores = [s.get("storeName", "") for s in info.get("stateStoreInfo", [])]
        facts.operators.append(StateOperator(operator_id=op, name=name, stores=stores))
    if store.exists(cs.join(root, str(SIGNATURE_FILE))):
        facts.signature = _signature(root)
        if facts.signature is None:
            log.warning("checkpoint %s: its state signature cannot be read: not compared", root)
    return facts


def _signature(checkpoint: str | Path) -> dict[str, Any] | None:
    """The recorded signature, of any version (None: none, or not a JSON object)."""
    try:
        data = json.loads(cs.store_for(checkpoint).read(cs.join(checkpoint, str(SIGNATURE_FILE))) or b"")
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
    signature = {**state_signature(plan), **({"engine": engine} if engine else {})}
    # by create-and-rename on a volume (a new inode: the epoch this one was linked from keeps its
    # own), one PUT on an object store
    cs.store_for(checkpoint).write(cs.join(checkpoint, str(SIGNATURE_FILE)),
                                   json.dumps(signature, indent=2, sort_keys=True).encode("utf-8"))


def verify(checkpoint: str | Path, plan: Plan) -> list[str]:
    facts = read_facts(checkpoint)
    if facts.signature is not None and not comparable(facts.signature):
        log.warning("checkpoint %s: its state signature is of version %r, this runtime compares "
                    "version %s: the state's meaning is not compared (checked as a checkpoint "
                    "without a signature)", checkpoint, facts.signature.get("version"), SIGNATURE_VERSION)
    return check(plan, facts)
