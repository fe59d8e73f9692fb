"""Typed routing: one handler per wire method, checked against the method table.

A :class:`Router` is built from ``{method: handler}`` for one serving role of
:data:`clankie.protocol.METHODS`. Construction fails (``RouterError``) when a
key is not a method of that role, when a method of the role has no handler and
is not named in ``unserved``, or when a handler's annotated record type is not
the method's request record. The connection has already decoded the params by
the table's request type, so a handler (``(conn, record)`` or ``(record)``, sync or async) receives that record, typed, and needs
no ``isinstance`` check. The router itself is a connection handler.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from clankie.errors import RemoteError
from clankie.protocol import METHODS, Code, Record

if TYPE_CHECKING:
    from clankie.connection import Connection

# ``(conn, record)`` or ``(record)``, sync or async, answering a record or None (a notification's)
Route = Callable[..., Any]


class RouterError(TypeError):
    """A router that does not match the method table: a programming error, raised at construction."""


def _positional(handler: Route) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(handler).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _param_type(handler: Route) -> Any:
    """The annotated type of the handler's record parameter (its last positional one), or None."""
    params = _positional(handler)
    if not params:
        raise RouterError(f"handler {handler!r} takes no record")
    try:
        hints = typing.get_type_hints(handler)
    except (NameError, TypeError):  # a partial, or an annotation only importable under TYPE_CHECKING: the method set is still checked
        return None
    return hints.get(params[-1].name)


def ignore(params: Record) -> None:
    """A route that accepts its method and does nothing (a record annotated ``Record`` fits any method)."""


class Router:
    """Dispatch a decoded request or notification to the handler registered for its method."""

    def __init__(self, role: str, routes: Mapping[str, Route], *, unserved: Collection[str] = ()) -> None:
        table = METHODS.get(role)
        if table is None:
            raise RouterError(f"no role {role!r} in the method table")
        unknown = sorted((set(routes) | set(unserved)) - set(table))
        if unknown:
            raise RouterError(f"{role} has no method {', '.join(unknown)} in the method table")
        missing = sorted(set(table) - set(routes) - set(unserved))
        if missing:
            raise RouterError(f"{role} serves no handler for {', '.join(missing)}")
        for method, handler in routes.items():
            declared = _param_type(handler)
            if declared not in (None, Record, table[method].params):
                raise RouterError(f"{role} {method}: handler takes {declared!r}, "
                                  f"the table says {table[method].params.__name__}")
        self.role = role
        self._routes = dict(routes)
        self._with_conn = {m for m, h in routes.items() if len(_positional(h)) >= 2}

    @property
    def methods(self) -> frozenset[str]:
        return frozenset(self._routes)

    async def __call__(self, conn: Connection, method: str, params: Record) -> Record | None:
        return await self.dispatch(method, params, conn)

    async def dispatch(self, method: str, params: Record, conn: Connection | None = None) -> Record | None:
        """Run ``method``'s route; ``conn`` may be left out when that route takes only its record
        (a host's routes, called by the host runtime inside its deadline)."""
        route = self._routes.get(method)
        if route is None:
            raise RemoteError(Code.METHOD_NOT_FOUND, f"{self.role} does not serve {method[:64]!r} here")
        if method in self._with_conn:
            if conn is None:
                raise RouterError(f"{self.role} {method}: the route takes the connection and none was given")
            answer = route(conn, params)
        else:
            answer = route(params)
        if inspect.isawaitable(answer):
            answer = await answer
        assert answer is None or isinstance(answer, Record), f"{method} handler answered {type(answer)!r}"
        return answer
