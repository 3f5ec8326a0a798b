"""``sluice operator``: run the control plane (kopf) in this process."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.operator.handlers.admission import WebhookSettings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "operator", help="Run the operator (kopf) in this process.",
        description="Reconcile StreamingQuery and QueryCluster objects.",
    )
    parser.add_argument("--namespace", "-n", action="append", default=[],
                        help="Namespace to watch (repeatable); absent: all namespaces.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--peering", metavar="NAME",
                      help="Also use kopf peering under this name (needs the kopf.dev CRDs).")
    mode.add_argument("--standalone", action="store_true", help="No kopf peering (the default).")
    parser.add_argument("--no-leader-election", action="store_true",
                        help="Act without holding the Lease (only one replica may run!).")
    parser.add_argument("--lease-name", default="sluice-operator")
    parser.add_argument("--lease-namespace", default=None,
                        help="Namespace of the Lease; default: $POD_NAMESPACE, the first --namespace "
                        "or default.")
    parser.add_argument("--lease-seconds", type=int, default=15)
    parser.add_argument("--identity", default=None,
                        help="Identity in the Lease (default: host name + random).")
    parser.add_argument("--metrics-port", type=int, default=9090, help="Prometheus port (0: off).")
    parser.add_argument("--kubeconfig", default=None, help="Kubeconfig (default: $KUBECONFIG or in-cluster).")
    parser.add_argument("--log-format", choices=["json", "text"], default="json")
    parser.add_argument("--verbose", "-v", action="store_true")
    hook = parser.add_argument_group(
        "admission webhook", "Validate StreamingQuery and QueryCluster objects before they are stored "
        "(docs/operator.md, 'Admission webhook'); off unless --webhook-port is given.")
    hook.add_argument("--webhook-port", type=int, default=None, metavar="PORT",
                      help="Serve the validating webhook (HTTPS) on this port.")
    hook.add_argument("--webhook-host", default="0.0.0.0", metavar="ADDR",
                      help="Address the webhook listens on (default 0.0.0.0).")
    reach = hook.add_mutually_exclusive_group()
    reach.add_argument("--webhook-url", default=None, metavar="URL",
                       help="Base URL the API server calls (a handler path is appended); default "
                       "https://<listen address>:<port>, 0.0.0.0 read as 127.0.0.1.")
    reach.add_argument("--webhook-service", default=None, metavar="NAMESPACE/NAME[:PORT]",
                       help="The Service in front of the operator that the API server calls (port 443 "
                       "by default).")
    hook.add_argument("--webhook-cert", default=None, metavar="PATH",
                      help="Server certificate (PEM), e.g. tls.crt of a mounted Secret; absent: self-signed.")
    hook.add_argument("--webhook-secret", default=None, metavar="NAME",
                      help="Keep a self-signed certificate in this Secret of the operator's namespace, made "
                      "or renewed by the leader (instead of --webhook-cert/--webhook-key).")
    hook.add_argument("--webhook-key", default=None, metavar="PATH", help="Its private key (PEM).")
    hook.add_argument("--webhook-ca", default=None, metavar="PATH",
                      help="CA bundle the API server trusts (ca.crt); default: the certificate itself.")
    hook.add_argument("--webhook-failure-policy", choices=["Fail", "Ignore"], default="Fail",
                      help="What the API server does when the webhook cannot answer (default Fail).")
    hook.add_argument("--webhook-timeout", type=int, default=10, metavar="SECONDS",
                      help="How long the API server waits for an answer, 1..30 (default 10).")
    hook.add_argument("--webhook-configuration", default="sluice-operator", metavar="NAME",
                      help="Name of the ValidatingWebhookConfiguration the operator keeps.")


def webhook_settings(args: argparse.Namespace) -> WebhookSettings | None:
    """The webhook's settings from the flags (None: no webhook); ValueError names a wrong flag.

    (``getattr``: callers that build the arguments themselves may leave the webhook flags out.)"""
    port = getattr(args, "webhook_port", None)
    if not port:
        return None
    from sluice.operator.handlers.admission import WebhookSettings

    if not 0 < port < 65536:
        raise ValueError(f"--webhook-port: {port} is not a port")
    cert, key = getattr(args, "webhook_cert", None), getattr(args, "webhook_key", None)
    if bool(cert) != bool(key):
        raise ValueError("--webhook-cert and --webhook-key go together")
    if cert and getattr(args, "webhook_secret", None):
        raise ValueError("--webhook-secret keeps its own certificate: leave out --webhook-cert/--webhook-key")
    timeout = int(getattr(args, "webhook_timeout", 10))
    if not 1 <= timeout <= 30:
        raise ValueError(f"--webhook-timeout: {timeout} is not within 1..30 seconds (the API server's limit)")
    service = None
    if getattr(args, "webhook_service", None):
        ref, _, port_text = str(args.webhook_service).partition(":")
        ns, _, name = ref.partition("/")
        if not ns or not name or (port_text and not port_text.isdigit()):
            raise ValueError(f"--webhook-service: {args.webhook_service!r} is not NAMESPACE/NAME[:PORT]")
        service = (ns, name, int(port_text or 443))
    url = getattr(args, "webhook_url", None)
    if url and not str(url).startswith("https://"):
        raise ValueError(f"--webhook-url: {url!r} must start with https:// (the API server calls HTTPS only)")
    return WebhookSettings(
        port=port, listen=getattr(args, "webhook_host", None) or "0.0.0.0", url=url, service=service,
        certfile=cert, keyfile=key, cafile=getattr(args, "webhook_ca", None),
        failure_policy=getattr(args, "webhook_failure_policy", None) or "Fail", timeout_seconds=timeout,
        configuration=getattr(args, "webhook_configuration", None) or "sluice-operator")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        ref = getattr(record, "k8s_ref", None)
        if ref:
            out["object"] = ref
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(fmt: str, verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("kubernetes", "urllib3", "asyncio", "aiohttp.access"):  # (one line per admission request)
        logging.getLogger(noisy).setLevel(logging.WARNING)


def api_client(kubeconfig: str | None) -> Any:
    from kubernetes import client, config

    path = kubeconfig or os.environ.get("KUBECONFIG")
    cfg = client.Configuration()
    if path:
        config.load_kube_config(config_file=path, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    cfg.connection_pool_maxsize = 32  # kopf runs up to 16 sync handlers at once
    return client.ApiClient(configuration=cfg)


def make_login(kubeconfig: str | None) -> Any:
    import kopf

    def login(**kwargs: Any) -> Any:
        path = kubeconfig or os.environ.get("KUBECONFIG")
        if path:
            from kubernetes import config

            loader_client = config.new_client_from_config(config_file=path)
            c = loader_client.configuration
            token = None
            # the client keeps a kubeconfig's token under "BearerToken" (older ones: "authorization")
            keys = c.api_key or {}
            auth = keys.get("BearerToken") or keys.get("authorization")
            if auth:
                token = auth.removeprefix("Bearer ").strip()
            info = kopf.ConnectionInfo(
                server=c.host,
                ca_path=c.ssl_ca_cert,
                insecure=not c.verify_ssl,
                certificate_path=c.cert_file,
                private_key_path=c.key_file,
                token=token,
                default_namespace="default",
            )
            return info
        return kopf.login_with_service_account(**kwargs)

    return login


def run_operator(args: argparse.Namespace, stop: threading.Event | None = None,
                 ready: threading.Event | None = None, env_factory: Any = None) -> int:
    """Run until ``stop`` is set (tests) or a signal arrives; returns the exit code.

    ``env_factory(kube) -> Env`` replaces the default environment (benchmarks use a stub Kafka).
    """
    import kopf

    from sluice.operator.env import Env
    from sluice.operator.handlers import _kopf
    from sluice.operator.kube import Kube
    from sluice.operator.leader import LeaderElector, mark_pod
    from sluice.operator.main import build_registry, register_admission

    webhook = webhook_settings(args)  # a wrong flag fails before anything starts
    stop = stop or threading.Event()
    api = api_client(args.kubeconfig)
    kube = Kube(api)
    if env_factory is not None:
        _kopf.configure(lambda: env_factory(kube))
    else:
        _kopf.configure(lambda: Env(kube=kube, events=_kopf.post_event))
    log = logging.getLogger("sluice.operator")

    if args.metrics_port:
        from sluice.operator.metrics import metrics, serve

        metrics()
        try:
            serve(args.metrics_port)
        except OSError as exc:
            log.warning("metrics port %s unavailable: %s", args.metrics_port, exc)

    identity = args.identity or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
    elector = None
    if not args.no_leader_election:
        lease_ns = args.lease_namespace or os.environ.get("POD_NAMESPACE") or (
            args.namespace[0] if args.namespace else "default")
        elector = LeaderElector(kube, lease_ns, args.lease_name, identity, lease_seconds=args.lease_seconds,
                                renew_seconds=max(1.0, args.lease_seconds / 3))
        pod_ns, pod_name = os.environ.get("POD_NAMESPACE"), os.environ.get("POD_NAME")
        mark_pod(kube, pod_ns, pod_name, leader=False)
        if not elector.wait_for_leadership(stop):
            return 0
        mark_pod(kube, pod_ns, pod_name, leader=True)
        lost = threading.Event()
        renewer = threading.Thread(target=elector.keep_renewing, args=(stop, lost), daemon=True,
                                   name="sluice-lease")
        renewer.start()
    else:
        lost = threading.Event()

    kopf_stop = threading.Event()

    def watchdog() -> None:
        while not kopf_stop.is_set():
            if stop.wait(0.5) or lost.is_set():
                kopf_stop.set()
                return

    threading.Thread(target=watchdog, daemon=True, name="sluice-stop").start()
    registry = build_registry(login=make_login(args.kubeconfig))
    server = None
    secret = getattr(args, "webhook_secret", None)
    if webhook is not None and secret:
        webhook = served_from_secret(kube, webhook, secret, args, stop)
    if webhook is not None:
        from sluice.operator.handlers.admission import AdmissionServer

        server = AdmissionServer(webhook, kube, namespaces=list(args.namespace or ()),
                                 withdraw_on_stop=lambda: not lost.is_set())
        register_admission(registry, server)
    log.info("operator %s starting (namespaces: %s)", identity, args.namespace or "all")

    async def operate() -> None:
        try:
            await kopf.operator(
                registry=registry,
                clusterwide=not args.namespace,
                namespaces=list(args.namespace or ()),
                standalone=args.peering is None,
                peering_name=args.peering,
                identity=identity,  # type: ignore[arg-type]
                stop_flag=kopf_stop,
                ready_flag=ready,
            )
        finally:
            # kopf waits for its stop flag in an executor thread: when kopf stops on its own (SIGTERM),
            # asyncio.run would wait for that thread forever
            kopf_stop.set()

    try:
        asyncio.run(operate())
    finally:
        kopf_stop.set()
        if elector is not None:
            elector.release()
    return 1 if lost.is_set() else 0


def served_from_secret(kube: Any, webhook: WebhookSettings, secret: str, args: argparse.Namespace,
                       stop: threading.Event) -> WebhookSettings:
    """The webhook served from the certificate the leader keeps in ``secret`` (made or renewed
    now, then checked twice a day)."""
    import dataclasses
    import tempfile
    from pathlib import Path

    from sluice.operator import webhook_certs

    namespace = os.environ.get("POD_NAMESPACE") or args.lease_namespace or (
        args.namespace[0] if args.namespace else "default")
    directory = Path(tempfile.gettempdir()) / "sluice-webhook"
    names = webhook.hostnames()
    served = webhook_certs.ensure(kube, namespace, secret, names, directory)
    webhook_certs.keep_renewed(kube, namespace, secret, names, directory, stop)
    return dataclasses.replace(webhook, certfile=str(served.certfile), keyfile=str(served.keyfile),
                               cafile=str(served.cafile))


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT while no kopf runs (kopf handles them itself once it does).

    A replica waiting for leadership must leave on SIGTERM: as a container's PID 1 it would ignore
    the signal, win the Lease its leader just released on the same scale-down, start kopf, publish
    the admission webhook and be killed at the end of the grace period, leaving a webhook nobody
    serves."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, args.verbose)
    try:
        webhook_settings(args)
    except ValueError as exc:
        print(f"sluice operator: {exc}", file=sys.stderr)
        return 2
    return run_operator(args, stop=stop_on_signals())
