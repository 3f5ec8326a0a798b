"""StreamingQuery deletion (finalizer): drain, apply the deletion policy, release."""

from __future__ import annotations

from typing import Any

from sluice.operator.deletion import delete_query
from sluice.operator.handlers._kopf import as_dict, env, kopf_errors


def handle(body: Any, retry: int, runtime: Any, **_: Any) -> None:
    with kopf_errors("StreamingQuery", "delete"):
        delete_query(env(), as_dict(body), retry=retry, runtime_seconds=runtime.total_seconds())
