"""``python -m supervisor``: the same as ``clankie run``."""

from __future__ import annotations

import sys

from supervisor.app import main

sys.exit(main())
