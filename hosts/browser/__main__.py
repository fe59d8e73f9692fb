"""``python -m hosts.browser``: the browser host process."""

from __future__ import annotations

import sys

from clankie import heap

heap.hold()  # no collector passes over the start's imports; run_child settles it once they are done

# Arm the parent-death signal before the heavy imports below: a process (a warm spare above all)
# still importing when the supervisor dies must die with it, not linger holding a listening socket.
from clankie.child import arm_parent_death

arm_parent_death()  # this process's environment

from clankie.entry import run_child
from hosts.runtime import host_spec

if __name__ == "__main__":
    from hosts.browser.host import serving_host

    sys.exit(run_child(host_spec("browser", serving_host)))
