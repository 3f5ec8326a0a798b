"""The Kafka connection of a QueryCluster (its own module: the engine snapshot uses it too)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sluice.crd.base import CrdModel, SecretKeyRef


class KafkaTls(CrdModel):
    """TLS towards the brokers; certificates come from Secrets, never inline."""

    ca_secret: SecretKeyRef | None = Field(default=None, description="CA certificate (PEM).")
    cert_secret: SecretKeyRef | None = Field(default=None, description="Client certificate (PEM).")
    key_secret: SecretKeyRef | None = Field(default=None, description="Client private key (PEM).")


class KafkaSasl(CrdModel):
    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(description="SASL mechanism.")
    username_secret: SecretKeyRef = Field(description="Secret key holding the user name.")
    password_secret: SecretKeyRef = Field(description="Secret key holding the password.")


class KafkaSettings(CrdModel):
    bootstrap_servers: str = Field(
        min_length=1, description="Comma-separated host:port list of Kafka brokers."
    )
    tls: KafkaTls | None = Field(default=None, description="TLS settings (Secret references).")
    sasl: KafkaSasl | None = Field(default=None, description="SASL settings (Secret references).")
    default_partitions: int = Field(
        default=1, ge=1, description="Partitions of sink topics the operator creates."
    )
    default_replication_factor: int = Field(
        default=1, ge=1, description="Replication factor of sink topics the operator creates."
    )
