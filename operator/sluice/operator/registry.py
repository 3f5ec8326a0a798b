"""The operator's schema registry client (Confluent-compatible API, through confluent-kafka's
``SchemaRegistryClient``): the latest version of an avro or protobuf source's subject (pinned into a
new plan, a Protobuf schema compiled), the registration of an avro or protobuf sink's schema at
rollout (idempotent: the same schema has the same id), and the compatibility of a changed sink
schema with its subject. Decisions from the answers are pure (``sluice.core.formats.registry``).

Failures are two kinds: :class:`RegistryUnavailable` (the registry did not answer, or answered with a
server error: retried with back-off) and :class:`RegistryRefused` (it answered no: a subject without
versions, an invalid schema, an incompatible registration).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from sluice.core.plan.model import RegistrySchema
from sluice.crd.registry import SchemaRegistry
from sluice.operator.kube import Kube
from sluice.operator.protoc import ProtocError, descriptor_of

__all__ = ["Registry", "RegistryClient", "RegistryRefused", "RegistryUnavailable", "read_registry_secrets"]

#: seconds a request may take before the registry counts as unavailable
TIMEOUT = 10.0


class RegistryUnavailable(Exception):
    """The registry did not answer (or failed on its side): retry later."""


class RegistryRefused(Exception):
    """The registry answered no (``status``: its HTTP status)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Registry(Protocol):
    """What the reconcile asks of a schema registry (a fake in tests)."""

    url: str

    def latest(self, subject: str) -> RegistrySchema: ...

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int: ...

    def compatibility(self, subject: str, schema: str,
                      schema_type: str = "AVRO") -> Mapping[str, Any] | None: ...


@dataclass
class RegistryClient:
    """A registry at ``url`` (``username``/``password``: basic auth; ``ca``: a CA certificate's PEM
    text)."""

    url: str
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None
    timeout: float = TIMEOUT

    def __post_init__(self) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        # no retries of its own: the reconcile retries with back-off, the webhook leaves it to the operator
        conf: dict[str, Any] = {"url": self.url, "timeout": self.timeout, "max.retries": 0}
        if self.username is not None:
            conf["basic.auth.user.info"] = f"{self.username}:{self.password or ''}"
        if self.ca_file is not None:
            conf["ssl.ca.location"] = self.ca_file
        self._client = SchemaRegistryClient(conf)

    def _call(self, what: str, call: Any) -> Any:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return call()
        except SchemaRegistryError as exc:
            if exc.http_status_code >= 500 or exc.http_status_code < 0:
                raise RegistryUnavailable(f"{what}: {exc.error_message}") from exc
            raise RegistryRefused(f"{what}: {exc.error_message}", exc.http_status_code) from exc
        except Exception as exc:  # the HTTP client's own errors: refused, timed out, TLS
            raise RegistryUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc

    def latest(self, subject: str) -> RegistrySchema:
        """The subject's latest version (its id, version and schema text), asked of the registry each
        time (the client's cache of latest versions is dropped: a new plan pins what is latest now). A
        Protobuf schema comes compiled (:func:`sluice.operator.protoc.compile_proto`); one with schema
        references, or of another type than Avro and Protobuf, is refused."""
        self._client.clear_latest_caches()
        found = self._call(f"the latest version of subject {subject!r}",
                           lambda: self._client.get_latest_version(subject))
        schema_type = found.schema.schema_type or "AVRO"
        text = str(found.schema.schema_str)
        pinned = RegistrySchema(subject=subject, schema_=text, id=int(found.schema_id),
                                version=int(found.version))
        if schema_type == "AVRO":
            return pinned
        if schema_type != "PROTOBUF":
            raise RegistryRefused(f"subject {subject!r} holds a {schema_type} schema, not Avro or "
                                  "Protobuf", 422)
        if found.schema.references:
            names = ", ".join(str(r.name) for r in found.schema.references)
            raise RegistryRefused(f"subject {subject!r} holds a Protobuf schema with references ({names}): "
                                  "schema references are not supported yet", 422)
        try:
            descriptor = descriptor_of(text, subject)
        except ProtocError as exc:
            raise RegistryRefused(str(exc), 422) from exc
        return pinned.model_copy(update={"schema_type": "PROTOBUF", "descriptor": descriptor})

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """Register ``schema`` under ``subject`` (an existing identical version keeps its id)."""
        from confluent_kafka.schema_registry import Schema

        return int(self._call(f"registering the sink schema under subject {subject!r}",
                              lambda: self._client.register_schema(subject, Schema(schema, schema_type))))

    def compatibility(self, subject: str, schema: str, schema_type: str = "AVRO") -> Mapping[str, Any] | None:
        """The registry's verbose answer on ``schema`` against the subject's latest version (None: the
        subject has no version yet, so anything is compatible)."""
        from confluent_kafka.schema_registry import Schema

        path = f"compatibility/subjects/{quote(subject, safe='')}/versions/latest?verbose=true"
        body = Schema(schema, schema_type).to_dict()
        try:
            answer = self._call(f"the compatibility of the sink schema with subject {subject!r}",
                                lambda: self._client._rest_client.post(path, body=body))
        except RegistryRefused as exc:
            if exc.status == 404:
                return None
            raise
        return dict(answer)


def read_registry_secrets(kube: Kube, namespace: str, settings: SchemaRegistry) -> dict[str, str]:
    """The basic-auth user name and password and the CA certificate the settings refer to."""
    out: dict[str, str] = {}
    for key, ref in (("username", settings.username_ref()), ("password", settings.password_ref()),
                     ("ca", settings.ca_ref())):
        if ref is None:
            continue
        secret = kube.get("Secret", namespace, ref.name) or {}
        data = secret.get("data") or {}
        if ref.key not in data:
            raise RegistryUnavailable(f"Secret {ref.name!r} has no key {ref.key!r}")
        out[key] = base64.b64decode(data[ref.key]).decode()
    return out
