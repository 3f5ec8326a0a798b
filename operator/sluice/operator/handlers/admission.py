"""The validating admission webhook (``sluice operator --webhook-port``): kopf ``on.validate`` handlers
for StreamingQuery and QueryCluster, and the HTTPS server that serves them and keeps the
ValidatingWebhookConfiguration pointing at it.

The handlers read what a decision needs (the QueryCluster, the running plan's ConfigMap) and let the
pure ``sluice.core.admission`` decide; its refusal becomes a ``kopf.AdmissionError`` (what ``kubectl``
prints), its warnings kopf's admission warnings. The reconcile validates again whatever the webhook
let through, so nothing depends on the webhook being up.

kopf's own management of the configuration (``settings.admission.managed``) is not used: it fixes
``timeoutSeconds`` at 30 and has no ``namespaceSelector``. :class:`AdmissionServer` publishes the
configuration built by ``sluice.core.admission.webhook_configuration`` each time kopf's server
(re)starts with a client config (at start, and when the certificate files change).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import ipaddress
import logging
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp.web
import kopf
from pydantic import ValidationError

from sluice.core import admission
from sluice.core.admission import RunningPlan, SpecModels, Verdict
from sluice.core.compiler import source_subjects
from sluice.core.formats.registry import SinkCheck, incompatibility
from sluice.core.naming import PLAN_FILE
from sluice.core.plan.model import RegistrySchema
from sluice.core.spec import REGISTRY_FORMATS
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator.handlers._kopf import as_dict, env
from sluice.operator.kube import MERGE_PATCH, Kube, KubeError
from sluice.operator.registry import RegistryRefused, RegistryUnavailable

log = logging.getLogger("sluice.operator")

MODELS = SpecModels(query=StreamingQuerySpec, cluster=QueryClusterSpec)
#: kopf handler ids; kopf's server routes ``<base>/<id>`` to the handler with that id
QUERY_HANDLER, CLUSTER_HANDLER = (handler_id for _, _, handler_id in admission.WEBHOOKS)
CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


# -- handlers --------------------------------------------------------------------------------------


def validate_query(*, body: Any, warnings: list[str], operation: str | None = None, old: Any = None,
                   new: Any = None, **_: Any) -> None:
    new_obj, old_obj = as_dict(new if new is not None else body), as_dict(old) if old is not None else None
    _answer(lambda: _review_query(str(operation), new_obj, old_obj), warnings, new_obj)


def validate_cluster(*, body: Any, warnings: list[str], operation: str | None = None, old: Any = None,
                     new: Any = None, **_: Any) -> None:
    new_obj, old_obj = as_dict(new if new is not None else body), as_dict(old) if old is not None else None
    _answer(lambda: admission.review_cluster(str(operation), new_obj, old_obj, models=MODELS), warnings,
            new_obj)


def _review_query(operation: str, new: dict[str, Any], old: dict[str, Any] | None) -> Verdict:
    if not admission.spec_changed(operation, new, old):
        return Verdict(True)  # metadata and status writes (the operator's own too): no API call
    kube, ns = env().kube, str(new["metadata"].get("namespace"))
    cluster_upgrade: dict[str, Any] | None = None
    cluster_spec: dict[str, Any] | None = None
    running: RunningPlan | None = None
    unavailable: str | None = None
    config_map = admission.running_config_map(old) if operation == admission.UPDATE and old else None
    try:
        cluster = kube.get("QueryCluster", ns, admission.cluster_name(new))
        cluster_upgrade = dict((cluster.get("spec") or {}).get("upgrade") or {}) if cluster else None
        cluster_spec = dict(cluster.get("spec") or {}) if cluster else None
        if config_map is not None:
            found = kube.get("ConfigMap", ns, config_map)
            running = RunningPlan(config_map, ((found or {}).get("data") or {}).get(PLAN_FILE))
    except KubeError as exc:
        unavailable = str(exc)
    schemas, sink_check, registry_unavailable = _registry_inputs(ns, new, cluster_spec)
    return admission.review_query(operation, new, old, cluster_upgrade, models=MODELS, running_plan=running,
                                  unavailable=unavailable or registry_unavailable, cluster=cluster_spec,
                                  schemas=schemas, sink_check=sink_check)


#: seconds each of the webhook's (at most two) registry requests may take: its answer, Kubernetes
#: reads included, has to come within the configuration's timeoutSeconds (10 by default)
REGISTRY_TIMEOUT = 3.0


def _registry_inputs(ns: str, new: dict[str, Any], cluster_spec: dict[str, Any] | None
                     ) -> tuple[dict[str, RegistrySchema] | None, SinkCheck | None, str | None]:
    """What the review asks of the QueryCluster's schema registry: the latest schema of each avro source
    subject, and the check of an avro sink's new schema, value or key (None, None, why: not asked)."""
    try:
        query = StreamingQuerySpec.model_validate(new.get("spec") or {}).query()
        settings = QueryClusterSpec.model_validate(cluster_spec).schema_registry if cluster_spec else None
    except ValidationError:
        return None, None, None  # the review refuses the spec, or the operator reports the cluster
    if settings is None or (not source_subjects(query) and not {query.sink.format, query.sink.key_format}
                            & REGISTRY_FORMATS):
        return None, None, None
    try:
        registry = env().registry(ns, settings, timeout=REGISTRY_TIMEOUT)
        schemas = {subject: registry.latest(subject) for subject in source_subjects(query)}
    except (RegistryUnavailable, RegistryRefused) as exc:
        return None, None, f"the schema registry at {settings.url}: {exc}"

    def sink_check(schema: RegistrySchema, what: str) -> str | None:
        try:
            answer = registry.compatibility(schema.subject, schema.schema_, schema.schema_type)
        except (RegistryUnavailable, RegistryRefused) as exc:
            log.warning("admission: the compatibility of %s not checked: %s", schema.subject, exc)
            return None  # the operator checks it again before it registers the schema
        return incompatibility(schema.subject, answer, what) if answer is not None else None

    return schemas, sink_check, None


def _answer(review: Callable[[], Verdict], warnings: list[str], obj: dict[str, Any]) -> None:
    """Answer kopf: warnings, and an AdmissionError on refusal. A failure of the webhook itself lets
    the request through (the reconcile still validates it) rather than refusing it for our bug."""
    try:
        verdict = review()
    except Exception as exc:
        meta = obj.get("metadata") or {}
        log.exception("admission of %s %s/%s failed", obj.get("kind"), meta.get("namespace"),
                      meta.get("name"))
        verdict = admission.allow(f"the webhook could not check this ({type(exc).__name__}: {exc}); the "
                                  f"operator checks it when it reconciles")
    warnings.extend(verdict.warnings)
    if not verdict.allowed:
        raise kopf.AdmissionError(verdict.message, code=verdict.code)


# -- the server and its configuration ---------------------------------------------------------------


@dataclass(frozen=True)
class WebhookSettings:
    """How the webhook is served and reached (``sluice operator --webhook-*``)."""

    port: int
    listen: str = "0.0.0.0"
    #: base URL the API server calls (``/<handler id>`` is appended); None: a Service, or kopf's
    #: ``https://<listen address>:<port>``
    url: str | None = None
    #: (namespace, name, port) of a Service in front of the operator
    service: tuple[str, str, int] | None = None
    certfile: str | None = None
    keyfile: str | None = None
    #: CA bundle written into the configuration; None: the certificate itself
    cafile: str | None = None
    failure_policy: str = "Fail"
    timeout_seconds: int = 10
    configuration: str = "sluice-operator"

    def hostnames(self) -> list[str]:
        """Names the API server may use for the server: put into a self-signed certificate."""
        names = [urlsplit(self.url).hostname or ""] if self.url else []
        if self.service is not None:
            ns, name, _ = self.service
            names += [name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"]
        return [n for n in names if n]


class AdmissionServer(kopf.WebhookServer):
    """kopf's HTTPS webhook server that also publishes the ValidatingWebhookConfiguration.

    kopf stops every task at once when the operator stops, so its handlers' last writes (finalizers,
    progress annotations: UPDATEs of the objects this webhook validates) could find the webhook gone
    while the configuration still sends them there (refused under ``failurePolicy: Fail``). So this
    server, when it stops, first withdraws the webhooks from the configuration (when
    ``withdraw_on_stop()`` says so: not after the Lease was lost, when the next leader may have
    published its own), keeps answering ``STOP_GRACE`` seconds while the API server catches up,
    then closes. The serving loop is kopf's (``kopf.WebhookServer.__call__``) with that stop added;
    it restarts with the new certificate when the certificate files change.

    Self-signed certificates (no ``--webhook-cert``) are made with ``cryptography``: kopf's own
    generator needs certbuilder/oscrypto, whose libcrypto detection fails on OpenSSL 3.0.10 and later.
    """

    #: seconds the server keeps answering after withdrawing its webhooks
    STOP_GRACE = 2.0

    def __init__(self, settings: WebhookSettings, kube: Kube, namespaces: Collection[str] = (),
                 withdraw_on_stop: Callable[[], bool] = lambda: True) -> None:
        names = settings.hostnames()
        super().__init__(addr=settings.listen, port=settings.port, host=names[0] if names else None,
                         certfile=settings.certfile, pkeyfile=settings.keyfile, cafile=settings.cafile,
                         extra_sans=names, file_check_interval=30.0)
        self.settings = settings
        self.kube = kube
        self.namespaces = sorted(namespaces)
        self.withdraw_on_stop = withdraw_on_stop
        self.published = False

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async def serve(request: aiohttp.web.Request) -> aiohttp.web.Response:
            return await self._serve(fn, request)

        while True:
            cadata, context = self._build_ssl()
            app = aiohttp.web.Application()
            app.add_routes([aiohttp.web.post("/{id:.*}", serve)])
            runner = aiohttp.web.AppRunner(app, handle_signals=False, shutdown_timeout=self.STOP_GRACE)
            await runner.setup()
            renewed = False
            try:
                port = self.port or self._allocate_free_port()
                site = aiohttp.web.TCPSite(runner, self.addr or None, port, ssl_context=context,
                                           reuse_address=True, reuse_port=True)
                await site.start()
                host = self.host or self._get_accessible_addr(self.addr)
                client_config: dict[str, Any] = {"url": self._build_url("https", host, port, "")}
                if cadata is not None:
                    client_config["caBundle"] = base64.b64encode(cadata).decode("ascii")
                await asyncio.to_thread(self.publish, client_config)
                yield client_config
                await self._until_files_change()
                renewed = True
                log.info("admission webhook: the certificate files changed, serving the new certificate")
            finally:
                try:
                    if not renewed and self.published and self.withdraw_on_stop():
                        await asyncio.to_thread(self.withdraw)
                        await asyncio.sleep(self.STOP_GRACE)
                finally:
                    await runner.cleanup()

    async def _until_files_change(self) -> None:
        """Return when the certificate, key or CA file changed (mounted Secrets are renewed in
        place); never without files."""
        paths = [p for p in (self.certfile, self.pkeyfile, self.cafile) if p is not None]
        if not paths:
            await asyncio.Event().wait()

        def digest() -> str:
            return hashlib.sha256(b"".join(Path(p).read_bytes() for p in paths)).hexdigest()

        first = digest()
        while True:
            await asyncio.sleep(self.file_check_interval)
            try:
                if digest() != first:
                    return
            except OSError:  # in the middle of a Secret's update: look again later
                continue

    def configuration(self, client_config: dict[str, Any]) -> dict[str, Any]:
        s = self.settings
        config: dict[str, Any] = {k: v for k, v in client_config.items() if k == "caBundle"}
        if s.service is not None:
            ns, name, port = s.service
            config["service"] = {"namespace": ns, "name": name, "port": port}
        else:
            config["url"] = s.url or client_config["url"]
        return admission.webhook_configuration(s.configuration, config, failure_policy=s.failure_policy,
                                               timeout_seconds=s.timeout_seconds, namespaces=self.namespaces)

    def publish(self, client_config: dict[str, Any]) -> None:
        """Create the configuration, or point the existing one at this server (its webhooks only)."""
        desired = self.configuration(client_config)
        try:
            self.kube.request("POST", CONFIGURATIONS, desired)
        except KubeError as exc:
            if exc.status != 409:
                raise
            self.kube.request("PATCH", f"{CONFIGURATIONS}/{self.settings.configuration}",
                              {"metadata": {"labels": desired["metadata"]["labels"]},
                               "webhooks": desired["webhooks"]}, content_type=MERGE_PATCH)
        self.published = True
        s, where = self.settings, desired["webhooks"][0]["clientConfig"]
        log.info("admission webhook %s published (%s, failurePolicy %s, timeout %ss)", s.configuration,
                 where.get("url") or where.get("service"), s.failure_policy, s.timeout_seconds)

    def withdraw(self) -> None:
        """Remove the webhooks from the configuration (a clean stop: nothing is sent to a server that
        is gone); best effort."""
        try:
            self.kube.request("PATCH", f"{CONFIGURATIONS}/{self.settings.configuration}", {"webhooks": []},
                              content_type=MERGE_PATCH)
            log.info("admission webhook %s withdrawn", self.settings.configuration)
        except KubeError as exc:
            if exc.status != 404:
                log.warning("could not withdraw the admission webhook %s: %s", self.settings.configuration,
                            exc)

    @staticmethod
    def build_certificate(hostnames: Collection[str], password: str | None = None) -> tuple[bytes, bytes]:
        return self_signed_certificate(hostnames, password)


def self_signed_certificate(hostnames: Collection[str], password: str | None = None,
                            days: int = 365) -> tuple[bytes, bytes]:
    """A self-signed certificate (also its own CA) for ``hostnames`` (DNS names and IP addresses; the
    unspecified addresses 0.0.0.0 and :: are left out), and its private key, PEM."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:  # pragma: no cover - the operator extra installs it
        raise RuntimeError(
            "a self-signed webhook certificate needs the 'cryptography' package (pip install "
            "'sluice[operator]'), or pass --webhook-cert and --webhook-key") from exc
    names: list[str] = []
    ips: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for host in dict.fromkeys(hostnames):
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            names.append(host)
            continue
        if not ip.is_unspecified:
            ips.append(ip)
    if not names and not ips:
        raise ValueError("a webhook certificate needs a host name or address")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else str(ips[0]))])
    now = dt.datetime.now(dt.UTC)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names] + [x509.IPAddress(ip) for ip in ips]
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         key_cert_sign=True, crl_sign=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(key, hashes.SHA256()))
    encryption: serialization.KeySerializationEncryption = serialization.NoEncryption()
    if password:
        encryption = serialization.BestAvailableEncryption(password.encode())
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))
