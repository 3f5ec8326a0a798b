"""The plugin's side of the API server: kubeconfig, context and namespace as kubectl takes them, the
``sq/NAME`` argument, and the reads and writes the subcommands share.

Everything goes through the operator's own REST client (``sluice.operator.kube.Kube``) on a
``kubernetes`` ApiClient made from the kubeconfig (``--kubeconfig``, else ``$KUBECONFIG``, else
``~/.kube/config``; in a pod without one, the pod's service account).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

from sluice.operator.kube import Kube, KubeError

#: the ways ``kubectl`` lets one name a StreamingQuery, lower case
QUERY_RESOURCE_NAMES = frozenset({
    "sq", "streamingquery", "streamingqueries", "streamingquery.sluice.dev", "streamingqueries.sluice.dev",
})
IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class PluginError(Exception):
    """Something the user has to fix or know: printed as ``error: <message>``, exit 1."""


def query_name(ref: str) -> str:
    """The name in ``sq/NAME`` (also ``streamingquery/NAME``, ``streamingqueries.sluice.dev/NAME``
    or a bare ``NAME``)."""
    kind, sep, name = ref.partition("/")
    if not sep:
        kind, name = "sq", ref
    if kind.lower() not in QUERY_RESOURCE_NAMES:
        raise PluginError(f"{ref!r}: expected sq/NAME (a StreamingQuery), not a {kind!r}")
    if not name or "/" in name:
        raise PluginError(f"{ref!r}: expected sq/NAME")
    return name


def add_flags(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """kubectl's connection flags. On the subcommands (``suppress``) they leave the value given
    before the subcommand alone when not given again."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument("--kubeconfig", default=default(None),
                        help="path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
    parser.add_argument("--context", default=default(None), help="the kubeconfig context to use")
    parser.add_argument("-n", "--namespace", default=default(None),
                        help="namespace (default: the context's namespace, else 'default')")


def flags_parent() -> argparse.ArgumentParser:
    """A parent parser carrying the connection flags, for each subcommand."""
    parent = argparse.ArgumentParser(add_help=False)
    add_flags(parent, suppress=True)
    return parent


@dataclass
class Session:
    """A client on the chosen context, and the namespace to work in."""

    kube: Kube
    namespace: str
    server: str

    # -- reads -------------------------------------------------------------------------------------
    def query(self, name: str) -> dict[str, Any]:
        obj = self.kube.get("StreamingQuery", self.namespace, name)
        if obj is None:
            raise PluginError(f'streamingquery "{name}" not found in namespace "{self.namespace}"')
        return obj

    def query_or_none(self, name: str) -> dict[str, Any] | None:
        return self.kube.get("StreamingQuery", self.namespace, name)

    def cluster(self, name: str) -> dict[str, Any] | None:
        return self.kube.get("QueryCluster", self.namespace, name)

    def config_map(self, name: str) -> dict[str, Any] | None:
        return self.kube.get("ConfigMap", self.namespace, name)

    def plan_config_map(self, query: str, plan_hash: str) -> dict[str, Any] | None:
        """The ConfigMap of plan ``plan_hash`` (12 characters or more) of query ``query``: by its
        name, else by its labels (a ConfigMap named otherwise by an earlier operator)."""
        from sluice.core.rollback import RollbackError
        from sluice.operator.rollback_request import find_plan_config_map

        try:
            return find_plan_config_map(self.kube, self.namespace, query, plan_hash)
        except RollbackError as exc:
            raise PluginError(str(exc)) from exc

    # -- writes ------------------------------------------------------------------------------------
    def patch_query(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A merge patch of the StreamingQuery (``metadata.resourceVersion`` in it: only if nobody
        changed the object since it was read)."""
        try:
            return self.kube.patch("StreamingQuery", self.namespace, name, patch)
        except KubeError as exc:
            if exc.status == 409:
                raise PluginError(f"sq/{name} changed since it was read (someone edited it): run the command "
                                  "again") from exc
            raise


def _context_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    from kubernetes import config

    contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
    chosen = next((c for c in contexts or [] if c.get("name") == context), None) if context else current
    return ((chosen or {}).get("context") or {}).get("namespace") or None


def connect(args: argparse.Namespace) -> Session:
    """A session from the connection flags in ``args`` (kubectl's rules for the namespace)."""
    import logging

    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise PluginError("the kubernetes client is not installed: pip install 'sluice[operator]'") from exc

    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retry warnings; the error says it all
    kubeconfig, context = getattr(args, "kubeconfig", None), getattr(args, "context", None)
    configuration = client.Configuration()
    namespace: str | None = None
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration,
                                persist_config=False)
        namespace = _context_namespace(kubeconfig, context)
    except config.ConfigException as exc:
        in_pod = os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig and not context
        if not in_pod:
            where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise PluginError(f"cannot use the kubeconfig {where}: {exc}") from exc
        config.load_incluster_config(client_configuration=configuration)
        if os.path.exists(IN_CLUSTER_NAMESPACE):
            with open(IN_CLUSTER_NAMESPACE, encoding="utf-8") as handle:
                namespace = handle.read().strip() or None
    except OSError as exc:
        raise PluginError(f"cannot read the kubeconfig {kubeconfig}: {exc.strerror or exc}") from exc
    configuration.retries = 1
    api = client.ApiClient(configuration)
    return Session(kube=Kube(api, timeout=20.0), namespace=getattr(args, "namespace", None) or namespace
                   or "default", server=str(configuration.host))
