"""``python -m hosts.tldraw``: the tldraw host process."""

from __future__ import annotations

import os
import sys

from hosts.runtime import main

if __name__ == "__main__":
    from hosts.tldraw.server import TldrawHost

    sys.exit(main(TldrawHost, "tldraw", os.environ))
