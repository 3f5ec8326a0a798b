"""``kubectl sluice``: a kubectl plugin that reads and rolls back StreamingQueries on a live cluster.

Installed with the package as the console script ``kubectl-sluice`` (kubectl finds it on PATH).
Each subcommand lives in its own module with ``register(subparsers)`` and ``run(args) -> int``,
like ``sluice.cli`` and ``sluice.commands``; what they compute is pure and tested without a
cluster, what they read and write goes through ``connection``.
"""
