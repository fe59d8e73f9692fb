"""The supervisor's word to a child on who may dial the socket it serves (:mod:`clankie.peers`)."""

from __future__ import annotations

from pydantic import Field

from clankie.protocol.base import Record


class Peers(Record):
    """``peers``: the only pids that may connect to the socket this child serves, from now on (empty: none yet)."""

    pids: tuple[int, ...] = Field(default=(), max_length=64)
