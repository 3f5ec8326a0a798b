"""Spark versions: what a plan compiled for one Spark may do on another (pure).

The one rule, used by the plan classifier (a plan's ``sparkVersion``), the engine classifier (a
QueryCluster's ``sparkVersion``) and the runtime (the installed PySpark against the plan's):

* the same major.minor: the plan runs unchanged (patch releases change no checkpoint format);
* a newer minor of the same major: in place on the same checkpoint. Spark reads the checkpoints
  of earlier minor versions of its major (where a minor changed a state format it kept reading
  the old one, e.g. Spark 3.3's strict distribution "retains the old behavior with the checkpoint
  built from older versions", Structured Streaming migration guide); a checkpoint backstop is kept
  before the first batch on the new Spark, so a rollback restores the checkpoint the old Spark wrote;
* an older minor (a downgrade): refused. A checkpoint written by a newer Spark may use formats the
  older one cannot read;
* another major: refused. Spark promises nothing across majors (Spark 3.0 fails a query that
  starts from a 2.x checkpoint with a stream-stream outer join).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:[-.+].*)?$")

Verdict = Literal["same", "upgrade", "downgrade", "major"]


class BadVersion(ValueError):
    pass


def parse(version: str) -> tuple[int, int, int]:
    """``4.3.0`` -> (4, 3, 0); ``4.3`` -> (4, 3, 0); a suffix (``-SNAPSHOT``, ``.dev1``) is ignored."""
    match = _VERSION.match(version.strip())
    if match is None:
        raise BadVersion(f"{version!r} is not a Spark version such as 4.3.0")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def line(version: str) -> str:
    """The major.minor line of ``version`` (``4.3.0`` -> ``4.3``)."""
    major, minor, _ = parse(version)
    return f"{major}.{minor}"


@dataclass(frozen=True)
class Move:
    verdict: Verdict
    message: str

    @property
    def allowed(self) -> bool:
        return self.verdict in ("same", "upgrade")


def move(old: str, new: str) -> Move:
    """What moving a running query from Spark ``old`` to Spark ``new`` is."""
    a, b = parse(old), parse(new)
    if a[:2] == b[:2]:
        return Move("same", f"Spark {old} -> {new}: the same line {line(new)}; the checkpoint is read as is")
    if a[0] != b[0]:
        return Move("major", f"Spark {old} -> {new} changes the major version: Spark does not promise that "
                    f"Spark {b[0]} reads a checkpoint Spark {a[0]} wrote. Keep this query on Spark "
                    f"{line(old)} (its QueryCluster's image and sparkVersion), or start a new query")
    if b[1] < a[1]:
        return Move("downgrade", f"Spark {old} -> {new} is a downgrade: a checkpoint written by Spark "
                    f"{line(old)} may use formats Spark {line(new)} cannot read")
    return Move("upgrade", f"Spark {old} -> {new}: a newer minor version of the same major reads the "
                f"checkpoint of the older one; a backstop of the checkpoint is kept before the first batch "
                f"on Spark {line(new)}")


def runs_on(plan_version: str, installed: str) -> str | None:
    """Why a runtime with Spark ``installed`` refuses a plan compiled for ``plan_version`` (None: it
    runs it). Only the same major.minor runs a plan: the plan's pinned settings and the checks of
    its checkpoint were made for that line."""
    if line(plan_version) == line(installed):
        return None
    return (f"the plan was compiled for Spark {plan_version} (line {line(plan_version)}), but this runtime "
            f"image carries Spark {installed} (line {line(installed)}); run it on an image of Spark "
            f"{line(plan_version)}, or declare the image's Spark in the QueryCluster's sparkVersion so "
            f"that the plan is compiled for it")
