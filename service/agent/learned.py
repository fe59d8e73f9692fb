"""What the governors learned of each route's limits, kept across restarts in one small file of the state dir.

``<state>/captain/routes-learned.json`` maps a route's name to the window its
governor may start with (:meth:`~service.agent.pacing.Pacing.learned`), so a
restart does not begin from one call again. The file is bounded
(:data:`MAX_ROUTES` names, :data:`MAX_BYTES`); one that is missing, too big
or unreadable is ignored (a slow start from one call, as on a first start)
and replaced at the next write. Writes are whole-file (a temporary file
renamed over it) and at most one per :data:`WRITE_EVERY` seconds of the
injected clock; :meth:`Learned.flush` writes what is left at stop.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from clankie.clock import Clock

log = logging.getLogger(__name__)

FILENAME = "routes-learned.json"
MAX_ROUTES = 16
MAX_BYTES = 4096
MAX_WINDOW = 1 << 16
WRITE_EVERY = 5.0


class Learned:
    """The windows by route, read once at start and written as they change."""

    def __init__(self, directory: Path, clock: Clock) -> None:
        self._path = directory / FILENAME
        self._clock = clock
        self._windows = _read(self._path)
        self._written_at: float | None = None
        self._dirty = False

    def window(self, route: str) -> int | None:
        """The window route ``route`` learned in an earlier life, or None."""
        return self._windows.get(route)

    def remember(self, route: str) -> _Remember:
        """What route ``route``'s governor calls with each new window."""
        return _Remember(self, route)

    def set(self, route: str, window: int) -> None:
        if route not in self._windows and len(self._windows) >= MAX_ROUTES:
            return  # the bound: a name past it is not kept (routes are at most 9; old names age out by rewrite)
        self._windows[route] = max(1, min(MAX_WINDOW, window))
        self._dirty = True
        now = self._clock.monotonic()
        if self._written_at is None or now - self._written_at >= WRITE_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write the file if anything changed since the last write."""
        if not self._dirty:
            return
        self._dirty = False
        self._written_at = self._clock.monotonic()
        tmp = self._path.with_suffix(".tmp")
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp.write_text(json.dumps(self._windows, sort_keys=True), encoding="utf-8")
            os.chmod(tmp, 0o600)
            os.replace(tmp, self._path)
        except OSError as exc:  # a full disk costs the next start its memory, never a turn
            log.warning("cannot keep the routes' learned limits: %s", exc.strerror)


class _Remember:
    def __init__(self, learned: Learned, route: str) -> None:
        self._learned = learned
        self._route = route

    def __call__(self, window: int) -> None:
        self._learned.set(self._route, window)


def _read(path: Path) -> dict[str, int]:
    try:
        if path.stat().st_size > MAX_BYTES:
            log.warning("%s is over %d bytes: ignored (a slow start from one call)", path.name, MAX_BYTES)
            return {}
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        log.warning("%s is unreadable: ignored (a slow start from one call)", path.name)
        return {}
    if not isinstance(raw, dict):
        return {}
    out: dict[str, int] = {}
    for name, window in list(raw.items())[:MAX_ROUTES]:
        if isinstance(name, str) and isinstance(window, int) and not isinstance(window, bool) and window >= 1:
            out[name] = min(MAX_WINDOW, window)
    return out
