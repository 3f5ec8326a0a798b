"""Checkpoints in object storage: ``spec.storage.objectStore`` of a QueryCluster (S3 and the stores
that speak its API, through Hadoop's ``s3a``). Part of the engine pinned per query: its connection
settings roll out like an image change, while a change of where the checkpoints live (``uri``, or a
move between a volume and an object store) is refused for running queries (``sluice.core.engine``)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from sluice.crd.base import CrdModel

__all__ = ["ACCESS_KEY", "OBJECT_STORE_URI_PATTERN", "SECRET_KEY", "ObjectStore"]

#: ``s3a://<bucket>[/<prefix>]``: an S3 bucket name (3..63 lowercase letters, digits, dots, hyphens)
#: and a prefix of S3's safe key characters. Also the CRD's pattern (the API server refuses the rest).
OBJECT_STORE_URI_PATTERN = r"^s3a://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9!_.*'()=-]+)*/?$"
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SEGMENT = re.compile(r"^[A-Za-z0-9!_.*'()=-]+$")
ENDPOINT_PATTERN = r"^https?://[^\s/?#@]+/?$"
REGION_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
SECRET_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: the keys of ``credentialsSecret``
ACCESS_KEY = "accessKey"
SECRET_KEY = "secretKey"
_ANNOTATION_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(SECRET_NAME_PATTERN)


def _annotation_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if not _ANNOTATION_NAME.fullmatch(name) or (prefix and (len(prefix) > 253
                                                            or not _DNS_SUBDOMAIN.fullmatch(prefix))):
        return f"{key!r} is not a valid annotation key"
    if prefix == "sluice.dev" or prefix.endswith(".sluice.dev"):
        return f"{key!r}: annotations under sluice.dev/ are owned by the operator"
    return None


class ObjectStore(CrdModel):
    """Where the queries' checkpoints (offsets, state store files) live when not on a volume."""

    uri: str = Field(
        max_length=1024, json_schema_extra={"pattern": OBJECT_STORE_URI_PATTERN},
        description="s3a://<bucket>[/<prefix>]: each query's checkpoint is "
        "<uri>/<serviceId>/<namespace>/<query>/v<planVersion>. Fixed for a running query: a query keeps "
        "the checkpoint storage it started on (a change reaches queries created afterwards; running "
        "queries refuse the engine upgrade, UpgradeRejected).",
    )
    endpoint: str | None = Field(
        default=None, max_length=512, pattern=ENDPOINT_PATTERN,
        description="http(s)://host[:port] of an S3-compatible store; absent: AWS S3 of region.",
    )
    region: str | None = Field(
        default=None, max_length=64, pattern=REGION_PATTERN,
        description="The bucket's region (e.g. eu-west-1); absent: the SDK's default resolution.",
    )
    path_style_access: bool = Field(
        default=False, description="Path-style requests (http://host/bucket/key), which most "
        "S3-compatible stores need; false: virtual-hosted style (AWS S3).",
    )
    credentials_secret: str | None = Field(
        default=None, min_length=1, max_length=253, pattern=SECRET_NAME_PATTERN,
        description=f"A Secret in the query's namespace with the keys {ACCESS_KEY} and {SECRET_KEY} "
        "(an access key pair); absent: the default AWS credentials chain of the pods (workload "
        "identity: EKS IRSA or Pod Identity, GKE/Azure workload identity through the query's "
        "ServiceAccount, see serviceAccountAnnotations).",
    )
    service_account_annotations: dict[str, str] = Field(
        default_factory=dict,
        description="Annotations of each query's ServiceAccount (<query>-spark), e.g. "
        "eks.amazonaws.com/role-arn or iam.gke.io/gcp-service-account, for workload identity. "
        "Keys under sluice.dev/ are refused.",
    )

    @field_validator("uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        if not value.startswith("s3a://"):
            scheme = value.split("://", 1)[0] if "://" in value else ""
            raise ValueError(f"must be s3a://<bucket>[/<prefix>] (scheme s3a, not {scheme or 'missing'!r})")
        bucket, _, prefix = value[len("s3a://"):].partition("/")
        if not _BUCKET.fullmatch(bucket):
            raise ValueError(f"must be s3a://<bucket>[/<prefix>]: {bucket!r} is not a bucket name (3..63 "
                             f"lowercase letters, digits, dots and hyphens)")
        for segment in [s for s in prefix.rstrip("/").split("/") if prefix.rstrip("/")]:
            if segment in (".", "..") or not _SEGMENT.fullmatch(segment):
                raise ValueError(f"must be s3a://<bucket>[/<prefix>]: prefix segment {segment!r} is not "
                                 f"allowed (letters, digits and !_.*'()=- ; no empty, . or .. segments)")
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not urlsplit(value).hostname:
            raise ValueError("must be http(s)://host[:port]")
        return value

    @field_validator("service_account_annotations")
    @classmethod
    def _annotations(cls, value: dict[str, str]) -> dict[str, str]:
        problems = [p for p in map(_annotation_key_problem, value) if p]
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @property
    def bucket(self) -> str:
        return self.uri[len("s3a://"):].partition("/")[0]

    @property
    def root(self) -> str:
        """The uri without a trailing slash: the checkpoints' common prefix."""
        return self.uri.rstrip("/")
