"""streamStreamJoinV1: stream-stream join on equality keys plus an event-time range (stateful).

The inputs are aliased (``left_alias``/``right_alias``) and the join condition is evaluated as
written in the plan. The output keeps both sides' columns qualified by their aliases, so later
steps refer to them as ``alias.column``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.plan.model import StreamStreamJoinV1

from sluice_runtime.steps.base import BuildContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

JOIN_TYPES = {"inner": "inner", "leftOuter": "left_outer", "rightOuter": "right_outer"}


def build(step: StreamStreamJoinV1, inputs: list[DataFrame], ctx: BuildContext) -> DataFrame:
    from pyspark.sql import functions as F

    del ctx
    left = inputs[0].alias(step.left_alias)
    right = inputs[1].alias(step.right_alias)
    return left.join(right, F.expr(step.condition), JOIN_TYPES[step.join_type])
