"""The supervisor's own metric families, each declared once as a typed constant (as the children's are in
:mod:`clankie.metrics`): the tree's (read at scrape time by :mod:`supervisor.metrics`) and its metrics port's
(:mod:`supervisor.metrics_port`). Declarations only, so ``scripts/gen-docs`` reads them without ``prometheus_client``.
"""

from __future__ import annotations

from clankie.metrics import Counter, Family, Gauge, Labels, unlabelled


def by_reason(reason: str) -> Labels:
    return (reason,)


CONNECTIONS_DROPPED = Counter(
    "clankie_metrics_connections_dropped_total",
    "Metrics connections closed early: evicted at the cap, refused, timed out, an accept that failed, a bad request.",
    by_reason, doc="metrics connections the port closed early: `evicted` at the cap, `refused` at the cap, `timeout`, "
    "`accept_failed`, `bad_request` (above)")


def by_child(child: str) -> Labels:
    return (child,)


def child_reason(child: str, reason: str) -> Labels:
    return (child, reason)


def build(version: str, revision: str) -> Labels:
    return (version, revision)


CHILD_UP = Gauge("clankie_child_up", "1 while a child is running (ready), else 0.", by_child,
                 doc="1 while the child is running (ready)")
CHILD_RESTARTS = Counter(
    "clankie_child_restarts_total",
    "Times a child was started again after its first start, by why: crash, watchdog, spawn_error, operator.", child_reason,
    doc="starts after the first, by why: `crash` (it exited or was killed unasked), `watchdog` (killed for missed "
    "heartbeats or a stalled run), `spawn_error` (its exec failed), `operator` (`clankiectl restart`, or `start` after a "
    "stop, a backoff or `fatal`); every reason of every child is exported from the first scrape, at 0 until it happens")
CHILD_FATAL = Gauge("clankie_child_fatal",
                    "1 while a child is fatal (restart intensity spent, or a configuration error), else 0.", by_child,
                    doc="1 while the child is `fatal` (restart intensity spent, or exit 78), else 0")
SPARE_TAKEOVERS = Counter("clankie_spare_takeovers_total", "Starts that took a child's warm spare instead of a cold spawn.",
                          by_child, doc="starts that took the warm spare instead of a cold spawn")
WATCHDOG_ABORTS = Counter("clankie_watchdog_aborts_total",
                          "Runs the stall watchdog aborted (silent past CLANKIE_STALL_SECONDS).", unlabelled,
                          doc="silent runs the stall watchdog aborted")
CHILD_RESIDENT_BYTES = Gauge("clankie_child_resident_bytes", "A child's resident memory, as it measured itself.", by_child,
                             doc="resident memory, as each child measured itself in its last heartbeat (below)")
CHILD_OPEN_FDS = Gauge("clankie_child_open_fds", "A child's open file descriptors, as it counted them itself.", by_child,
                       doc="open file descriptors, as each child counted them in its last heartbeat (below)")
BUILD_INFO = Gauge("clankie_build_info", "Always 1: the running build's version and source revision.", build,
                   doc="always 1: the running build (the distribution's version, the checkout's commit or `unknown`; "
                   "`clankiectl --version` prints the same)")
SUPERVISOR_FAMILIES: tuple[Family, ...] = (CHILD_UP, CHILD_RESTARTS, CHILD_FATAL, SPARE_TAKEOVERS, WATCHDOG_ABORTS,
                                           CHILD_RESIDENT_BYTES, CHILD_OPEN_FDS, BUILD_INFO, CONNECTIONS_DROPPED)
"""The supervisor's own families (read from the tree and its metrics port at scrape time), each declared once; the
endpoint also serves ``prometheus_client``'s ``process_*`` of the supervisor itself."""
