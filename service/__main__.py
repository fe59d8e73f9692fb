"""``python -m service``: the captain process (see :mod:`service.app`)."""

from __future__ import annotations

import sys

from clankie import heap

heap.hold()  # no collector passes over the start's imports; run_child settles it once they are done

# Arm the parent-death signal before the heavy imports below: a process (a warm spare above all)
# still importing when the supervisor dies must die with it, not linger holding a listening socket.
from clankie.child import arm_parent_death, make_undumpable

make_undumpable()  # it will hold a secret: its /proc/<pid>/environ and mem are closed to same-uid processes
arm_parent_death()  # this process's environment

from service.app import main

if __name__ == "__main__":
    sys.exit(main())
