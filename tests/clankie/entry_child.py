"""A child run through :func:`clankie.entry.run_child`, for tests/clankie/test_entry.py.

``python -m tests.clankie.entry_child MODE``; MODE is ``keep`` or ``drop``
(whether the spec keeps secrets; both serve until stopped), ``park`` (keeps
secrets and parks first), ``ends`` (the body returns by itself) or
``refuses`` (the body raises a ConfigError while running). Once running,
the body prints one JSON line: what a process it spawns inherits of the
secret variables, which secrets its settings hold, what was observed
(whether the meter is on, and what the spec's observability part had been
configured with when the body was built) and the garbage collector's state
(:mod:`clankie.heap`: held off from the first line, on and its start frozen
by the time the body runs). ``close`` prints ``closed``.
"""

from __future__ import annotations

from clankie import heap

heap.hold()  # as every child's __main__ does (hence the imports below it, as there): the collector off from the first line, until run_child settles it

import asyncio
import gc
import json
import subprocess
import sys
from collections.abc import Mapping

from clankie.entry import ChildSpec, Ready, run_child
from clankie.errors import ConfigError
from clankie.ipc import Handler
from clankie.metrics import METER
from clankie.observability import Part
from clankie.protocol import Heartbeat
from clankie.secrets import SECRET_VARIABLES
from clankie.settings import Settings

CONFIGURED: list[str] = []
"""Each configuration of the spec's observability part, in order."""


def _probe(settings: Settings, environ: Mapping[str, str]) -> None:
    CONFIGURED.append("metrics" if settings.metrics_listen else "no metrics")


PROBE = Part("probe", _probe, CONFIGURED.clear)


class Body:
    link_handler: Handler | None = None

    def __init__(self, settings: Settings, mode: str) -> None:
        self.settings = settings
        self.mode = mode
        self.at_build = list(CONFIGURED)

    def heartbeat(self) -> Heartbeat:
        return Heartbeat(detail="test child")

    async def prepare(self) -> None:
        pass

    async def run(self, ready: Ready) -> None:
        spawned = subprocess.run(["env", "-0"], capture_output=True, check=True).stdout.split(b"\0")
        inherited = sorted(item.split(b"=", 1)[0].decode() for item in spawned if item.split(b"=", 1)[0].decode() in SECRET_VARIABLES)
        held = sorted(name for name in ("discord_token", "anthropic_api_key") if getattr(self.settings, name) is not None)
        observed = {"meter": METER.enabled, "at_build": self.at_build}
        collector = {"on": gc.isenabled(), "frozen": gc.get_freeze_count() > 0}
        print(json.dumps({"inherited": inherited, "held": held, "observed": observed, "collector": collector}), flush=True)
        await ready()
        if self.mode == "ends":
            return
        if self.mode == "refuses":
            raise ConfigError("the test body refuses")
        await asyncio.Event().wait()

    async def close(self) -> None:
        print("closed", flush=True)


def spec(mode: str) -> ChildSpec:
    def build(settings: Settings, environ: Mapping[str, str]) -> Body:
        return Body(settings, mode)

    return ChildSpec("testchild", build, keeps_secrets=mode != "drop", parks_first=mode == "park", observability=(PROBE,))


if __name__ == "__main__":
    sys.exit(run_child(spec(sys.argv[1])))
