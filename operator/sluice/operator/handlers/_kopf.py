"""What every handler shares: the Env of this process, and error translation for kopf."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import kopf

from sluice.operator.env import Env, Retry, Stop
from sluice.operator.kube import KubeError

log = logging.getLogger("sluice.operator")

_ENV: Env | None = None
_ENV_FACTORY: Callable[[], Env] | None = None


def configure(factory: Callable[[], Env]) -> None:
    """Set how the Env is made (the operator command and tests call this before kopf starts)."""
    global _ENV, _ENV_FACTORY
    _ENV_FACTORY = factory
    _ENV = None


def env() -> Env:
    global _ENV
    if _ENV is None:
        if _ENV_FACTORY is None:
            raise RuntimeError("sluice operator handlers are not configured")
        _ENV = _ENV_FACTORY()
    return _ENV


def post_event(body: dict[str, Any], type_: str, reason: str, message: str) -> None:
    try:
        kopf.event(body, type=type_, reason=reason, message=message[:1000])  # type: ignore[arg-type]
    except Exception:  # events are best-effort; never fail a reconcile for one
        log.debug("could not post event %s", reason, exc_info=True)


@contextmanager
def kopf_errors(kind: str, action: str) -> Iterator[None]:
    e = env()
    with e.metrics.timed(kind, action):
        try:
            yield
        except Retry as exc:
            e.metrics.reconcile_errors.labels(kind=kind, reason="Retry").inc()
            raise kopf.TemporaryError(str(exc), delay=exc.delay) from exc
        except Stop as exc:
            e.metrics.reconcile_errors.labels(kind=kind, reason="InvalidInput").inc()
            raise kopf.PermanentError(str(exc)) from exc
        except KubeError as exc:
            e.metrics.reconcile_errors.labels(kind=kind, reason=f"HTTP{exc.status}").inc()
            raise kopf.TemporaryError(str(exc), delay=2 if exc.status == 409 else 10) from exc
        except Exception:
            e.metrics.reconcile_errors.labels(kind=kind, reason="Unexpected").inc()
            raise


def as_dict(body: Any) -> dict[str, Any]:
    """kopf's Body as a plain dict (a snapshot; handlers never mutate it)."""
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": dict(body.get("metadata", {})),
        "spec": _plain(body.get("spec", {})),
        "status": _plain(body.get("status", {})),
    }


def _plain(value: Any) -> Any:
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
