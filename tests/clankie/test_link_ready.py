"""A child says ``ready`` only after a heartbeat with its own figures, cold or taken over from a spare
(``clankie/link.py``): the supervisor's status shows a running child's memory and fds from the moment it runs. A
beat's metrics are read after its report, which sets the child's gauges."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator

import pytest

from clankie import ipc
from clankie.handover import SPARE_ENV
from clankie.link import supervisor_link
from clankie.metrics import LANES_LIVE, METER
from clankie.protocol import Empty, Heartbeat, Record
from tests.polling import until

NEVER = 3600.0
"""The loop's interval: the loop beats once, when the link opens, so any later beat is the one ``ready`` sends."""


async def _heard_until_ready(spare: bool, report: Callable[[], Heartbeat] | None = None) -> list[tuple[str, Record]]:
    """What the supervisor's end of a real link hears up to the child's ``ready``, in order; a spare is activated
    once it has parked and beaten."""
    heard: list[tuple[str, Record]] = []

    async def on_child(conn: ipc.Connection, method: str, params: Record) -> Record | None:
        heard.append((method, params))
        return None

    ours, theirs = socket.socketpair()
    sup_task = asyncio.ensure_future(ipc.from_socket(ours, "supervisor", on_child, initiate=False))
    env = {"CLANKIE_SUPERVISOR_FD": str(theirs.detach()), **({SPARE_ENV: "1"} if spare else {})}
    async with supervisor_link("fixture", report=report, env=env, interval=NEVER) as link:
        sup = await sup_task
        if spare:
            waiting = asyncio.ensure_future(link.activation())
            await until(lambda: {"parked", "heartbeat"} <= {m for m, _ in heard}, what="the spare to park and beat",
                        step=0.005)
            heard.append(("(activate)", Empty()))
            await sup.notify("activate", Empty())
            assert await waiting
        await link.ready()
        await until(lambda: any(m == "ready" for m, _ in heard), what="ready", step=0.005)
    await sup.aclose()
    return heard[: [m for m, _ in heard].index("ready") + 1]


def _beats(heard: list[tuple[str, Record]]) -> list[Heartbeat]:
    return [p for m, p in heard if m == "heartbeat" and isinstance(p, Heartbeat)]


def _measured(beat: Heartbeat) -> bool:
    sample = beat.process
    return sample is not None and (sample.rss_bytes or 0) > 0 and (sample.num_fds or 0) > 0


def test_a_cold_child_beats_with_its_figures_right_before_it_says_ready() -> None:
    heard = asyncio.run(_heard_until_ready(spare=False))
    (last, _), (before, beat) = heard[-1], heard[-2]
    assert last == "ready"
    assert before == "heartbeat" and isinstance(beat, Heartbeat) and _measured(beat)


def test_a_taken_spare_beats_again_after_its_activation_before_it_says_ready() -> None:
    """The parked process's beats are the spare slot's; the child it becomes must measure itself before ``ready``."""
    heard = asyncio.run(_heard_until_ready(spare=True))
    activated = [m for m, _ in heard].index("(activate)")
    parked, taken = _beats(heard[:activated]), _beats(heard[activated:])
    assert parked, "the spare beat while parked"
    assert heard[-1][0] == "ready" and taken and all(_measured(b) for b in taken)


@pytest.fixture
def meter_on() -> Iterator[None]:
    METER.enabled = True
    try:
        yield
    finally:
        METER.reset()


def test_a_beats_metrics_carry_the_gauges_its_own_report_just_set(meter_on: None) -> None:
    """The service's report sets its gauges (lanes live, budgets) as it is asked for the beat: the metrics sent with
    that beat are read after it, not one beat behind."""
    lanes = iter(range(1, 100))

    def report() -> Heartbeat:
        METER.set(LANES_LIVE.of(), float(next(lanes)))
        return Heartbeat()

    heard = asyncio.run(_heard_until_ready(spare=False, report=report))
    for beat in _beats(heard):
        assert beat.metrics is not None
        (series,) = beat.metrics.gauges[LANES_LIVE.name]
        assert series.value == beat.seq  # the n-th beat's report set n, and that beat says n
