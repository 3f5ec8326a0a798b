"""Kafka client settings a QueryCluster may pass to the queries' clients, and OAUTHBEARER tokens (pure).

``spec.kafka.clientSettings`` has three string maps, ``consumer``, ``producer`` and ``admin``, keyed by
Kafka *Java* client property names. Only the keys of :data:`SETTINGS` are accepted, each for the
clients it applies to; the table says, per key, the librdkafka (confluent-kafka) property with the
same meaning, or None when only the Java clients (Spark's Kafka source and sink) take it. Where they go:

* ``consumer``: Spark's Kafka source (``kafka.<key>`` options);
* ``producer``: Spark's Kafka sink (at-least-once) and the runtime's transactional producer of an
  exactly-once sink (librdkafka names; Java-only keys skipped);
* ``admin``: the runtime's and the operator's admin clients (librdkafka names).

What the operator sets itself (addresses, security, group and transactional ids, delivery and
isolation guarantees, (de)serializers, offsets) is *owned by the operator* and refused with the
field's path (:func:`problems`), by the admission webhook and the reconcile alike (both validate the
QueryCluster model); so is any key outside the table (``not an allowed Kafka client setting``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = ["CLIENTS", "OWNED", "SETTINGS", "Client", "ClientSetting", "ClientSettings", "Problem",
           "TokenClaims", "problems", "token_claims"]

Client = Literal["consumer", "producer", "admin"]
CLIENTS: Final[tuple[Client, ...]] = ("consumer", "producer", "admin")
_ALL: Final[frozenset[Client]] = frozenset(CLIENTS)
_CONSUMER: Final[frozenset[Client]] = frozenset({"consumer"})
_PRODUCER: Final[frozenset[Client]] = frozenset({"producer"})
_CONSUMER_ADMIN: Final[frozenset[Client]] = frozenset({"consumer", "admin"})

OWNED: Final = "owned by the operator"
UNKNOWN: Final = "not an allowed Kafka client setting"
_INT_MAX: Final = 2**31 - 1


@dataclass(frozen=True)
class ClientSetting:
    """One allowed Kafka Java client property."""

    key: str
    #: the clients it may be given to
    clients: frozenset[Client]
    #: the librdkafka property with the same meaning; None: the Java clients only
    librdkafka: str | None
    #: an integer value within these bounds (None: not an integer setting)
    minimum: int | None = None
    maximum: int | None = None
    #: one of these values (None: any)
    choices: tuple[str, ...] | None = None

    def problem(self, value: str) -> str | None:
        """Why ``value`` is no value of this setting (None: it is)."""
        if self.choices is not None:
            return None if value in self.choices else f"must be one of {', '.join(self.choices)}"
        if self.minimum is None:
            return None
        try:
            number = int(value.strip())
        except ValueError:
            return "must be an integer (a string in the map, e.g. \"1048576\")"
        top = self.maximum if self.maximum is not None else 2**63 - 1
        if not self.minimum <= number <= top:
            upper = f" and at most {self.maximum}" if self.maximum is not None else ""
            return f"must be at least {self.minimum}{upper}"
        return None


def _int(key: str, clients: frozenset[Client], librdkafka: str | None, minimum: int = 0,
         maximum: int | None = None) -> ClientSetting:
    return ClientSetting(key, clients, librdkafka, minimum=minimum, maximum=maximum)


#: The allow-list: every key a QueryCluster may set, once. Bounds are those both clients accept where
#: the key reaches both (librdkafka's are the narrower).
SETTINGS: Final[tuple[ClientSetting, ...]] = (
    # consumer (Spark's Kafka source)
    ClientSetting("client.rack", _CONSUMER, "client.rack"),
    _int("fetch.min.bytes", _CONSUMER, "fetch.min.bytes", 1, 100_000_000),
    _int("fetch.max.wait.ms", _CONSUMER, "fetch.wait.max.ms", 0, 300_000),
    _int("fetch.max.bytes", _CONSUMER, "fetch.max.bytes", 0, _INT_MAX - 512),
    _int("max.partition.fetch.bytes", _CONSUMER, "max.partition.fetch.bytes", 1, 1_000_000_000),
    _int("max.poll.records", _CONSUMER, None, 1, _INT_MAX),
    ClientSetting("check.crcs", _CONSUMER, "check.crcs", choices=("true", "false")),
    _int("default.api.timeout.ms", _CONSUMER_ADMIN, None, 0, _INT_MAX),
    # producer (Spark's Kafka sink; the exactly-once sink's transactional producer)
    _int("linger.ms", _PRODUCER, "linger.ms", 0, 900_000),
    _int("batch.size", _PRODUCER, "batch.size", 1, _INT_MAX),
    ClientSetting("compression.type", _PRODUCER, "compression.type",
                  choices=("none", "gzip", "snappy", "lz4", "zstd")),
    _int("max.request.size", _PRODUCER, "message.max.bytes", 1000, 1_000_000_000),
    # the transactional producer's delivery timeout is bound to its transaction timeout: Java only
    _int("delivery.timeout.ms", _PRODUCER, None, 0, _INT_MAX),
    _int("buffer.memory", _PRODUCER, None, 0),
    # every client
    _int("receive.buffer.bytes", _ALL, "socket.receive.buffer.bytes", 1, 100_000_000),
    _int("send.buffer.bytes", _ALL, "socket.send.buffer.bytes", 1, 100_000_000),
    _int("request.timeout.ms", _ALL, "socket.timeout.ms", 10, 300_000),
    _int("retry.backoff.ms", _ALL, "retry.backoff.ms", 1, 300_000),
    _int("reconnect.backoff.ms", _ALL, "reconnect.backoff.ms", 0, 3_600_000),
    _int("reconnect.backoff.max.ms", _ALL, "reconnect.backoff.max.ms", 0, 3_600_000),
    _int("connections.max.idle.ms", _ALL, "connections.max.idle.ms", 0, _INT_MAX),
    _int("metadata.max.age.ms", _ALL, "metadata.max.age.ms", 1, 86_400_000),
    _int("socket.connection.setup.timeout.ms", _ALL, "socket.connection.setup.timeout.ms", 1000, _INT_MAX),
    _int("socket.connection.setup.timeout.max.ms", _ALL, None, 1000, _INT_MAX),
    ClientSetting("client.dns.lookup", _ALL, "client.dns.lookup",
                  choices=("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only")),
)
BY_KEY: Final[dict[str, ClientSetting]] = {s.key: s for s in SETTINGS}

#: keys the operator sets (or that would break what it guarantees): refused, with what to do instead
OWNED_KEYS: Final[dict[str, str]] = {
    "bootstrap.servers": "spec.kafka.bootstrapServers",
    "security.protocol": "derived from spec.kafka.tls and spec.kafka.sasl",
    "group.id": "derived from the query's identity",
    "group.instance.id": "",
    "client.id": "",
    "transactional.id": "derived from the query's identity",
    "transaction.timeout.ms": "",
    "enable.idempotence": "",
    "acks": "the sink's delivery decides",
    "retries": "the sink's delivery decides",
    "max.in.flight.requests.per.connection": "the sink's delivery decides",
    "isolation.level": "",
    "enable.auto.commit": "",
    "auto.commit.interval.ms": "",
    "auto.offset.reset": "the source's startingOffsets",
    "key.serializer": "", "value.serializer": "", "key.deserializer": "", "value.deserializer": "",
    "interceptor.classes": "", "partitioner.class": "", "metric.reporters": "",
}
OWNED_PREFIXES: Final[dict[str, str]] = {
    "sasl.": "spec.kafka.sasl", "ssl.": "spec.kafka.tls",
}


@dataclass(frozen=True)
class Problem:
    """A refused client setting: where (relative to ``clientSettings``) and why."""

    loc: tuple[str, ...]
    message: str


def _owned(key: str) -> str | None:
    if key in OWNED_KEYS:
        hint = OWNED_KEYS[key]
        return f"{OWNED}: {hint}" if hint else OWNED
    for prefix, hint in OWNED_PREFIXES.items():
        if key.startswith(prefix):
            return f"{OWNED}: {hint}"
    return None


def key_problem(client: Client, key: str, value: Any) -> str | None:
    """Why ``key: value`` is refused in the ``client`` map (None: accepted)."""
    owned = _owned(key)
    if owned is not None:
        return owned
    setting = BY_KEY.get(key)
    if setting is None:
        allowed = ", ".join(s.key for s in SETTINGS if client in s.clients)
        return f"{UNKNOWN} (allowed for {client}: {allowed})"
    if client not in setting.clients:
        applies = ", ".join(c for c in CLIENTS if c in setting.clients)
        return f"not a {client} setting (it applies to: {applies})"
    if not isinstance(value, str):
        return None  # the model's type check names it
    return setting.problem(value)


def problems(data: Any) -> list[Problem]:
    """Every refused key of a ``clientSettings`` object as written (``{consumer: {...}, ...}``)."""
    if not isinstance(data, Mapping):
        return []
    found: list[Problem] = []
    for client in CLIENTS:
        entries = data.get(client)
        if not isinstance(entries, Mapping):
            continue
        for key, value in entries.items():
            message = key_problem(client, str(key), value)
            if message is not None:
                found.append(Problem((client, str(key)), message))
    return found


@dataclass(frozen=True)
class ClientSettings:
    """The accepted settings per client (Java names), and what each client dialect gets of them."""

    consumer: Mapping[str, str] = field(default_factory=dict)
    producer: Mapping[str, str] = field(default_factory=dict)
    admin: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for client in CLIENTS:
            for key, value in self.of(client).items():
                message = key_problem(client, key, value)
                if message is not None:
                    raise ValueError(f"{client}.{key}: {message}")

    def of(self, client: Client) -> Mapping[str, str]:
        return {"consumer": self.consumer, "producer": self.producer, "admin": self.admin}[client]

    def is_empty(self) -> bool:
        return not (self.consumer or self.producer or self.admin)

    def java(self, client: Client) -> dict[str, str]:
        """The Java client properties of ``client`` (unprefixed)."""
        return dict(sorted(self.of(client).items()))

    def spark(self, client: Client) -> dict[str, str]:
        """Options of Spark's Kafka source (``consumer``) or sink (``producer``): ``kafka.<key>``."""
        return {f"kafka.{key}": value for key, value in self.java(client).items()}

    def librdkafka(self, client: Client) -> dict[str, str]:
        """The librdkafka properties of ``client``: mapped names, the Java-only keys left out."""
        out: dict[str, str] = {}
        for key, value in sorted(self.of(client).items()):
            name = BY_KEY[key].librdkafka
            if name is not None:
                out[name] = value.strip()
        return out

    def to_json(self) -> str:
        """The non-empty maps as JSON (``SLUICE_KAFKA_CLIENT_SETTINGS``)."""
        return json.dumps({c: dict(self.of(c)) for c in CLIENTS if self.of(c)}, sort_keys=True,
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ClientSettings:
        """The settings of :meth:`to_json`; ValueError naming the problem."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not JSON: {exc}") from exc
        if not isinstance(data, dict) or set(data) - set(CLIENTS):
            raise ValueError(f"must be a JSON object with the keys {', '.join(CLIENTS)}")
        maps: dict[str, dict[str, str]] = {}
        for client, entries in data.items():
            if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
                raise ValueError(f"{client}: must be an object of strings")
            maps[client] = {str(k): v for k, v in entries.items()}
        return cls(**maps)


EMPTY: Final = ClientSettings()


# -- OAUTHBEARER tokens --------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenClaims:
    """What a client tells the broker's SASL/OAUTHBEARER exchange besides the token itself."""

    subject: str
    #: seconds since the epoch (the JWT's ``exp``)
    expires: float


def _segment(text: str, what: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"the token's {what} is not base64url JSON") from exc
    if not isinstance(value, dict):
        raise ValueError(f"the token's {what} is not a JSON object")
    return value


def token_claims(token: str) -> TokenClaims:
    """The ``sub`` and ``exp`` claims of a compact JWT (the signature is the broker's to check);
    ValueError when it is no JWT or lacks them."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise ValueError("the token is not a JWT (header.payload.signature)")
    _segment(parts[0], "header")
    claims = _segment(parts[1], "payload")
    subject, expires = claims.get("sub"), claims.get("exp")
    if not isinstance(subject, str) or not subject:
        raise ValueError("the token has no 'sub' claim")
    if isinstance(expires, bool) or not isinstance(expires, (int, float)):
        raise ValueError("the token has no numeric 'exp' claim")
    return TokenClaims(subject=subject, expires=float(expires))
