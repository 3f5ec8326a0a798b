"""Whether this runtime can honour a plan: its format version and the Spark it was compiled for.

A driver refuses, before its JVM starts, a plan whose format is newer than this runtime reads, and
a plan compiled for another Spark line than the one installed (:func:`sluice.core.sparkversion.runs_on`:
the plan's pinned settings and the checks of its checkpoint were made for that line). The refusal
names both versions; it is reported on the driver's pod (``sluice.dev/driver-error``, class
``PlanIncompatible``), where the health gate of the upgrade that brought it finds it and rolls back.
"""

from __future__ import annotations

import json
from typing import Any

from sluice.core import sparkversion
from sluice.core.plan.model import PLAN_FORMAT_VERSION

PLAN_INCOMPATIBLE = "PlanIncompatible"


class PlanIncompatible(RuntimeError):
    error_class = PLAN_INCOMPATIBLE


def installed_spark() -> str:
    """The Spark version of the installed PySpark (no JVM is started)."""
    import pyspark

    return str(pyspark.__version__)


def refusal(plan: dict[str, Any], installed: str) -> str | None:
    """Why a runtime with Spark ``installed`` refuses the plan ``plan`` (its JSON, read before the
    models validate it: a newer format may hold steps this runtime does not know); None: it runs it."""
    version = plan.get("version")
    if isinstance(version, int) and version > PLAN_FORMAT_VERSION:
        return (f"the plan has format version {version}, newer than this runtime reads "
                f"({PLAN_FORMAT_VERSION}); run it on a runtime image of the operator that compiled it")
    wanted = plan.get("sparkVersion")
    if not isinstance(wanted, str) or not wanted:
        return None  # plans always carry it; a hand-written one without it runs as before
    try:
        return sparkversion.runs_on(wanted, installed)
    except sparkversion.BadVersion as exc:
        return f"the plan's sparkVersion is unreadable: {exc}"


def check(text: str | bytes, installed: str | None = None) -> None:
    """Raise :class:`PlanIncompatible` when the plan in ``text`` cannot run here."""
    try:
        data = json.loads(text)
    except ValueError:
        return  # not JSON: the plan loader says what is wrong with it
    if not isinstance(data, dict):
        return
    why = refusal(data, installed or installed_spark())
    if why is not None:
        raise PlanIncompatible(why)
