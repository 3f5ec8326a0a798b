"""The schema registry of a QueryCluster (``spec.schemaRegistry``): where the queries' Avro sources
find their schemas and their Avro sinks register theirs (Confluent-compatible API). Not part of the
engine: a source's schema is pinned in the plan, and a sink's id is the registry's answer at rollout."""

from __future__ import annotations

from pydantic import Field

from sluice.crd.base import CrdModel, SecretKeyRef
from sluice.crd.objectstore import SECRET_NAME_PATTERN

__all__ = ["CA_KEY", "PASSWORD_KEY", "USERNAME_KEY", "SchemaRegistry"]

#: the keys of ``basicAuthSecret``
USERNAME_KEY = "username"
PASSWORD_KEY = "password"
#: the key of ``tlsSecret``: the CA certificate (PEM), as in a kubernetes.io/tls or cert-manager Secret
CA_KEY = "ca.crt"
URL_PATTERN = r"^https?://[^\s?#@]+$"


class SchemaRegistry(CrdModel):
    """A Confluent-compatible schema registry (Confluent Schema Registry, Apicurio's ccompat API,
    Karapace...)."""

    url: str = Field(
        min_length=8, max_length=1024, pattern=URL_PATTERN,
        description="Base URL a Confluent client is given, e.g. http://registry:8080/apis/ccompat/v7.",
    )
    basic_auth_secret: str | None = Field(
        default=None, max_length=253, pattern=SECRET_NAME_PATTERN,
        description=f"Secret (in the query's namespace) with the keys {USERNAME_KEY} and {PASSWORD_KEY} "
        "for HTTP basic authentication; absent: none.",
    )
    tls_secret: str | None = Field(
        default=None, max_length=253, pattern=SECRET_NAME_PATTERN,
        description=f"Secret (in the query's namespace) whose key {CA_KEY} holds the CA certificate (PEM) "
        "that signed the registry's certificate (https); absent: the system's CAs.",
    )

    def username_ref(self) -> SecretKeyRef | None:
        return SecretKeyRef(name=self.basic_auth_secret, key=USERNAME_KEY) if self.basic_auth_secret else None

    def password_ref(self) -> SecretKeyRef | None:
        return SecretKeyRef(name=self.basic_auth_secret, key=PASSWORD_KEY) if self.basic_auth_secret else None

    def ca_ref(self) -> SecretKeyRef | None:
        return SecretKeyRef(name=self.tls_secret, key=CA_KEY) if self.tls_secret else None
