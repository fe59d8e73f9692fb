"""The service's file-descriptor limit: raised to the hard limit at start, and how close it is.

Every room the service serves may hold files and sockets open, so it runs
with the most descriptors it is allowed: at start the soft ``RLIMIT_NOFILE``
is raised to the hard one (the unit sets both with ``LimitNOFILE=``;
``docs/operations.md``). The heartbeat reports ``fds N/LIMIT`` from
:func:`usage`.
"""

from __future__ import annotations

import logging
import os
import resource

log = logging.getLogger(__name__)


def raise_to_hard() -> tuple[int, int]:
    """Raise the soft fd limit to the hard limit; return ``(soft, hard)`` as they now are, and say so in the log."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the fd limit from %d to %d: %s", soft, hard, exc)
            return soft, hard
        log.info("fd limit raised from %d to the hard limit %d", soft, hard)
        return hard, hard
    log.info("fd limit %d (hard %d)", soft, hard)
    return soft, hard


def usage() -> tuple[int, int]:
    """``(open fds, soft limit)`` of this process."""
    try:
        count = len(os.listdir("/proc/self/fd")) - 1  # the listing's own descriptor
    except OSError:
        count = -1
    return count, resource.getrlimit(resource.RLIMIT_NOFILE)[0]
