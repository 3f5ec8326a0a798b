"""A local node agent for development and tests (not part of the product).

It registers a Node with a real kube-apiserver and runs the pods bound to it as local processes:
one loopback address per pod, volumes bind-mounted in a private mount namespace per container,
downward API and service-account tokens resolved, probes, restarts with back-off and graceful
termination. See ``docs/nodeagent.md``.

This package's ``__init__`` must stay import-light: ``sluice_dev.nodeagent.launch`` runs before
every container process starts.
"""
