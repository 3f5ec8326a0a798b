"""What a driver reports to the operator about the plan it runs (pure): progress, errors, the
checkpoint backstop, and the operator's request to restore it.

The health gate of an upgrade (``sluice.core.gate``) reads these records; the runtime writes them.
All travel through the API server, never through a connection from the operator to a pod:

* ``HOLDER_PROGRESS`` (Lease annotation, written by the holder with its renewals): the plan hash
  it runs, the Lease epoch (``leaseTransitions``) of its term, the micro-batches committed in this
  term and the progress events seen (an idle trigger loop still reports progress), and the main
  query's lag behind its sources (``lagRecords``, what a backfill's switch waits for). A record of
  an older plan or an older term never counts for a newer rollout.
* ``DRIVER_ERROR`` (pod annotation, written by the driver on its own pod): the last error of the
  process (warm-up or active term), with the exception class, message and plan step where it can
  be told. The pod keeps it across container restarts.
* ``BACKSTOP`` (Lease annotation, written by a holder that took over from a driver on another
  plan): the checkpoint epoch kept, untouched, from before the switch.
* ``RESTORE_REQUEST`` (Lease annotation, written by the operator for a rollback that cannot hand
  back on the current checkpoint): the next holder running ``planHash`` starts from that backstop
  epoch instead of the newest one, and writes ``RESTORE_DONE`` with the request's id.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

HOLDER_PROGRESS = "sluice.dev/holder-progress"
DRIVER_ERROR = "sluice.dev/driver-error"
BACKSTOP = "sluice.dev/backstop"
RESTORE_REQUEST = "sluice.dev/restore-request"
RESTORE_DONE = "sluice.dev/restore-done"

#: error message length kept in annotations and status
MAX_MESSAGE = 600


def load_object(text: str | None) -> dict[str, Any] | None:
    """The JSON object of an annotation (None when there is none, or it is not an object)."""
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _dump(obj: Any) -> str:
    return json.dumps({k: v for k, v in asdict(obj).items() if v is not None}, sort_keys=True,
                      separators=(",", ":"))


@dataclass(frozen=True)
class Progress:
    """The holder's progress in its current term."""

    plan_hash: str
    epoch: int  # leaseTransitions when this holder took over
    batches: int  # micro-batches committed in this term
    progress_events: int  # progress events seen in this term (idle triggers included)
    input_rows: int = 0  # rows the committed batches read
    dead_letters: int = 0  # of them, rows routed to a dead-letter topic (malformed)
    #: records the main query is behind its sources in its newest progress report (sum over every
    #: source partition of latest - end offset); None: not known (no report with latest offsets)
    lag_records: int | None = None
    #: the engine digest the holder runs on (SLUICE_ENGINE; "" when it was given none)
    engine: str = ""

    def to_json(self) -> str:
        data: dict[str, Any] = {"planHash": self.plan_hash, "epoch": self.epoch, "batches": self.batches,
                                "progressEvents": self.progress_events, "inputRows": self.input_rows,
                                "deadLetters": self.dead_letters}
        if self.lag_records is not None:
            data["lagRecords"] = self.lag_records
        if self.engine:
            data["engine"] = self.engine
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> Progress | None:
        data = load_object(text)
        if data is None or not data.get("planHash"):
            return None
        try:
            lag = data.get("lagRecords")
            return cls(str(data["planHash"]), int(data.get("epoch") or 0), int(data.get("batches") or 0),
                       int(data.get("progressEvents") or 0), int(data.get("inputRows") or 0),
                       int(data.get("deadLetters") or 0), None if lag is None else int(lag),
                       str(data.get("engine") or ""))
        except (TypeError, ValueError):
            return None


@dataclass(frozen=True)
class DriverError:
    """The last error of a driver process."""

    plan_hash: str
    phase: str  # "warm-up" (before holding the Lease) or "active"
    error_class: str
    message: str
    time: str  # RFC 3339
    step: str | None = None  # the plan step the error points at, where it can be told
    engine: str = ""  # the engine digest the driver runs on

    def to_json(self) -> str:
        return json.dumps({"planHash": self.plan_hash, "phase": self.phase, "class": self.error_class,
                           "message": self.message[:MAX_MESSAGE], "time": self.time,
                           **({"step": self.step} if self.step else {}),
                           **({"engine": self.engine} if self.engine else {})}, sort_keys=True,
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> DriverError | None:
        data = load_object(text)
        if data is None or not data.get("planHash"):
            return None
        return cls(plan_hash=str(data["planHash"]), phase=str(data.get("phase") or "active"),
                   error_class=str(data.get("class") or "Error"), message=str(data.get("message") or ""),
                   time=str(data.get("time") or ""), step=data.get("step") or None,
                   engine=str(data.get("engine") or ""))

    def summary(self) -> str:
        where = f" in step {self.step}" if self.step else ""
        return f"{self.error_class}{where}: {self.message}"


@dataclass(frozen=True)
class Backstop:
    """A checkpoint epoch kept from before a switch of plan or engine."""

    epoch: int
    plan_hash: str  # the plan that wrote it
    to_plan: str  # the plan that took over from it
    time: str
    engine: str = ""  # the engine that wrote it
    to_engine: str = ""  # the engine that took over from it

    def to_json(self) -> str:
        data: dict[str, Any] = {"epoch": self.epoch, "planHash": self.plan_hash, "toPlan": self.to_plan,
                                "time": self.time}
        data.update({k: v for k, v in (("engine", self.engine), ("toEngine", self.to_engine)) if v})
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> Backstop | None:
        data = load_object(text)
        if data is None or "epoch" not in data:
            return None
        try:
            return cls(int(data["epoch"]), str(data.get("planHash") or ""), str(data.get("toPlan") or ""),
                       str(data.get("time") or ""), str(data.get("engine") or ""),
                       str(data.get("toEngine") or ""))
        except (TypeError, ValueError):
            return None


@dataclass(frozen=True)
class RestoreRequest:
    """The operator asks the next holder running ``plan_hash`` (on ``engine``, when given) to start
    from backstop ``epoch``."""

    id: str
    epoch: int
    plan_hash: str
    engine: str = ""

    def to_json(self) -> str:
        data: dict[str, Any] = {"id": self.id, "epoch": self.epoch, "planHash": self.plan_hash}
        if self.engine:
            data["engine"] = self.engine
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> RestoreRequest | None:
        data = load_object(text)
        if data is None or not data.get("id"):
            return None
        try:
            return cls(str(data["id"]), int(data["epoch"]), str(data.get("planHash") or ""),
                       str(data.get("engine") or ""))
        except (KeyError, TypeError, ValueError):
            return None


def same_engine(recorded: str, wanted: str | None) -> bool:
    """Whether a record of engine ``recorded`` is one of ``wanted`` (None or "": any engine)."""
    return not wanted or recorded == wanted


def pending_restore(annotations: dict[str, str], plan_hash: str, engine: str = "") -> RestoreRequest | None:
    """The restore a holder running ``plan_hash`` on ``engine`` must carry out when it takes over,
    if any (a request naming an engine is for a holder on that engine only)."""
    request = RestoreRequest.from_json(annotations.get(RESTORE_REQUEST))
    if request is None or request.plan_hash != plan_hash or annotations.get(RESTORE_DONE) == request.id:
        return None
    if request.engine and request.engine != engine:
        return None
    return request


# -- errors -----------------------------------------------------------------------------------

_JAVA_CLASS = re.compile(r"\b((?:[a-z_][a-z0-9_]*\.)+[A-Z][A-Za-z0-9_]*(?:Exception|Error))\b")
_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)?)\]")
_SQL_FRAGMENT = re.compile(r"== SQL(?: of [^\n]*?)? ?\(line \d+, position \d+\) ==[ \t]*\n(.+?)\n")
_CLASS_PREFIX = re.compile(r"^(?:[a-z_][a-z0-9_]*\.)+[A-Z][A-Za-z0-9_]*:\s*")


def error_of(text: str) -> tuple[str, str]:
    """(exception class, message) from the text of a failed query's exception.

    Spark's own error class (``[CAST_INVALID_INPUT]``) is preferred; else the innermost-looking Java
    exception class named; else ``"Error"``."""
    text = text.strip()
    named = _ERROR_CLASS.search(text)
    java = _JAVA_CLASS.findall(text)
    error_class = named.group(1) if named else (java[-1].rsplit(".", 1)[-1] if java else "Error")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    tag = f"[{named.group(1)}]" if named else None
    first = next((line for line in lines if tag and tag in line), lines[0] if lines else "")
    if tag and tag in first:  # from the error class on: the wrappers in front say nothing to a user
        first = first[first.find(tag):]
    while _CLASS_PREFIX.match(first):
        first = _CLASS_PREFIX.sub("", first, count=1)
    return error_class, first[:MAX_MESSAGE]


def locate_step(steps: list[dict[str, Any]], text: str) -> str | None:
    """The id of the plan step whose expressions contain the SQL fragment Spark quotes in ``text``
    (``== SQL (line 1, position 8) ==`` followed by the fragment), if exactly one does."""
    match = _SQL_FRAGMENT.search(text)
    if match is None:
        return None
    fragment = re.sub(r"\s+", " ", match.group(1)).strip().strip("^").strip()
    if len(fragment) < 3:
        return None
    norm = fragment.lower()
    hits = [str(s.get("id")) for s in steps
            if norm in re.sub(r"\s+", " ", json.dumps(s, sort_keys=True)).lower().replace('\\"', '"')]
    return hits[0] if len(hits) == 1 else None
