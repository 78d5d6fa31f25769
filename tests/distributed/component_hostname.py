"""``[core] hostname_callable`` for the distributed test: each component reports its own name.

All components run on one machine, so by default every worker and triggerer would report the same
host name, and nobody could tell from Airflow which one ran a task or held a trigger. The harness
starts each component with ``CREW_DIST_HOSTNAME`` set and this module on ``PYTHONPATH``.
"""

from __future__ import annotations

import os


def hostname() -> str:
    """The component's name, e.g. ``worker-1`` or ``triggerer-2``."""
    return os.environ["CREW_DIST_HOSTNAME"]
