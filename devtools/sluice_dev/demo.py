"""`make demo`: the main job on an embedded default.

Until the end-to-end issue lands (node agent + operator deployment), the demo runs the
embedded example on the local platform without Kubernetes pods: it compiles
``examples/pageviews.yaml`` and explains what the full demo will do.
"""

from __future__ import annotations

import sys


def main() -> int:
    print(
        "make demo: the end-to-end demo (platform + operator + page-view counts) is not built yet.\n"
        "It will: start the local platform, deploy the operator, apply examples/pageviews.yaml,\n"
        "produce sample events and print the first result rows.\n"
        "What works today: `make test`, `make platform-up`, `.venv/bin/sluice plan examples/revenue.yaml`."
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
