"""``python -m hosts.browser``: the browser host process."""

from __future__ import annotations

import os
import sys

from hosts.runtime import main

if __name__ == "__main__":
    from hosts.browser.host import BrowserHost

    sys.exit(main(BrowserHost, "browser", os.environ))
