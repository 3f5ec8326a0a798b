"""Shared pieces of the CRD models: resources, secret references, the CRD base model."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError

from sluice.core.records import StatusModel

__all__ = ["API_VERSION", "GROUP", "VERSION", "CrdKind", "CrdModel", "ResourceAmounts", "Resources",
           "SecretKeyRef", "StatusModel"]

GROUP = "sluice.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


class CrdModel(BaseModel):
    """Base of CRD sub-models: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


QUANTITY_PATTERN = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"


class ResourceAmounts(CrdModel):
    cpu: str | None = Field(
        default=None, pattern=QUANTITY_PATTERN, description="CPU quantity, e.g. '500m' or '2'."
    )
    memory: str | None = Field(
        default=None, pattern=QUANTITY_PATTERN, description="Memory quantity, e.g. '1Gi'."
    )

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in (("cpu", self.cpu), ("memory", self.memory)) if v is not None}


class Resources(CrdModel):
    """Compute resources of a pod's container (Kubernetes quantities)."""

    requests: ResourceAmounts | None = Field(default=None, description="Guaranteed resources.")
    limits: ResourceAmounts | None = Field(default=None, description="Upper bounds.")

    def merged(self, override: Resources | None) -> Resources:
        """This resources block with the fields set in ``override`` replacing ours."""
        if override is None:
            return self
        req = {**(self.requests.as_dict() if self.requests else {}),
               **(override.requests.as_dict() if override.requests else {})}
        lim = {**(self.limits.as_dict() if self.limits else {}),
               **(override.limits.as_dict() if override.limits else {})}
        return Resources(
            requests=ResourceAmounts(**req) if req else None,
            limits=ResourceAmounts(**lim) if lim else None,
        )

    def as_k8s(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        if self.requests and self.requests.as_dict():
            out["requests"] = self.requests.as_dict()
        if self.limits and self.limits.as_dict():
            out["limits"] = self.limits.as_dict()
        return out


class SecretKeyRef(CrdModel):
    """A key of a Secret in the namespace of the object referring to it."""

    name: str = Field(min_length=1, max_length=253, description="Name of the Secret.")
    key: str = Field(min_length=1, max_length=253, description="Key within the Secret.")


class CrdKind:
    """Metadata of one custom resource kind, used by the CRD generator."""

    kind: ClassVar[str]
    plural: ClassVar[str]
    singular: ClassVar[str]
    short_names: ClassVar[list[str]]
    categories: ClassVar[list[str]] = ["sluice"]
    printer_columns: ClassVar[list[dict[str, Any]]]


def value_at(data: Any, loc: tuple[str | int, ...]) -> Any:
    """What ``data`` holds at ``loc`` (None where it holds nothing)."""
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def refusal(model: str, error_type: str,
            problems: Iterable[tuple[tuple[str | int, ...], str, Any]]) -> ValidationError:
    """A model's refusal of ``problems`` (location, message, the value written there), one error
    each, as pydantic reports its own: what a ``mode="before"`` validator raises when the model's
    own rules (owned fields, allow-lists, credentials) refuse what was written."""
    return ValidationError.from_exception_data(model, [
        InitErrorDetails(type=PydanticCustomError(error_type, message), loc=loc, input=value)
        for loc, message, value in problems])
