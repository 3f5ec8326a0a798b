"""Output gap of a replace with hand-off (plan version N+1 on a new checkpoint, starting where
version N's output ends) against an in-place upgrade (same checkpoint), interleaved, through driver
pods on the local platform: ``bench_upgrade.py --kinds replace,upgrade``.

Steady input into two exactly-once queries; each replace adds or removes a second (empty) source
with UNION ALL, each in-place upgrade toggles a WHERE that passes every record. Prints one line per
event, p50/p95 of the output gap and of the runtime's gap per kind, their ratio, and how many
records were lost or duplicated (read_committed) across every replace.

    python bench/bench_replace.py [--events 5] [--rate 20]

A replace with backfill is measured by ``bench/bench_backfill.py`` (1,000,000 pre-filled records:
time from the edit to the switch, and the backfill's read time against a fresh query).
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from bench_upgrade import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(("replace", "upgrade"), __doc__))
