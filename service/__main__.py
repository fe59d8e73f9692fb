"""``python -m service``: the captain process (see :mod:`service.app`)."""

from __future__ import annotations

import sys

from service.app import main

if __name__ == "__main__":
    sys.exit(main())
