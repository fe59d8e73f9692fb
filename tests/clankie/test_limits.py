"""The pure admission rules for listening sockets (clankie.limits)."""

from __future__ import annotations

import pytest

from clankie.limits import Admit, Held, Limits, Refuse, decide

CONTROL = Limits(max_connections=8, per_pid=3, root_reserve=2, idle_timeout=60.0, evict_idle=True)


def held(n: int, *, pid: int = 0, uid: int = 1000, busy: bool = False, start: int = 0) -> list[Held]:
    return [Held(key=start + i, pid=pid or 100 + start + i, uid=uid, busy=busy, idle_since=float(start + i)) for i in range(n)]


def test_one_process_gets_at_most_per_pid_connections() -> None:
    """A fourth connection from one pid is refused even with room to spare."""
    mine = [Held(key=i, pid=42, uid=1000, busy=False, idle_since=0.0) for i in range(3)]
    assert decide(CONTROL, 42, 1000, mine) == Refuse("pid 42 already holds 3 connections")
    assert decide(CONTROL, 43, 1000, mine) == Admit()


def test_a_non_root_uid_never_takes_roots_reserved_slots() -> None:
    """With its share (max - reserve) busy, the service's uid is refused while root still gets in."""
    busy = held(6, busy=True)
    assert isinstance(decide(CONTROL, 999, 1000, busy), Refuse)
    assert decide(CONTROL, 999, 0, busy) == Admit()


def test_a_full_share_of_idle_connections_makes_room_by_closing_the_idlest() -> None:
    """Idle eviction: the connection idle longest goes, busy ones never do."""
    pool = [*held(3, busy=True), *held(3, start=3)]
    assert decide(CONTROL, 999, 1000, pool) == Admit(evict=3)


def test_root_connections_are_evicted_last_when_everything_is_full() -> None:
    """At the total cap an idle non-root connection goes before an older idle root one."""
    pool = [*held(2, uid=0), *held(5, busy=True, start=2), *held(1, start=7)]
    assert decide(CONTROL, 999, 0, pool) == Admit(evict=7)


def test_without_eviction_a_full_socket_refuses() -> None:
    """The tree's own sockets never evict: an idle bridge link is legitimate."""
    limits = Limits(max_connections=4, root_reserve=0)
    assert decide(limits, 1, 1000, held(4)) == Refuse("uid 1000 already holds 4 connections")


def test_impossible_limits_are_refused() -> None:
    """A reserve as large as the cap would leave nothing for anyone else."""
    with pytest.raises(ValueError):
        Limits(max_connections=4, root_reserve=4)
    assert Limits.capped(64).root_reserve == 8 and Limits.capped(16).per_uid == 14
