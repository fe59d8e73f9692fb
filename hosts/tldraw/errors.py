"""Refusals of the diagram engine, each with a stable snake_case ``code``."""

from __future__ import annotations

from clankie.errors import ClankieError
from clankie.protocol import Code

__all__ = ["DiagramError", "DiagramInvalid", "DiagramTooLarge", "RenderFailed"]


class DiagramError(ClankieError):
    """Root of every refusal the diagram engine raises.

    Raised never directly: catch it to turn any engine refusal into a wire
    error ``{code, message}``; ``str(exc)`` is safe to show the model (it
    names the offending field, never echoes large content).
    """

    code: str = Code.DIAGRAM_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class DiagramInvalid(DiagramError):
    """Raised when a request does not match the tool's schema.

    Wrong types, unknown or missing keys, empty names, duplicate names,
    references to unknown entities or participants, forbidden characters.
    """

    code = Code.DIAGRAM_INVALID


class DiagramTooLarge(DiagramError):
    """Raised when a well-formed request exceeds a size limit.

    Too many entities, fields, relations, participants or messages, a text
    longer than its limit, or a laid-out canvas too big to rasterize.
    """

    code = Code.DIAGRAM_TOO_LARGE


class RenderFailed(DiagramError):
    """Raised when the rasterizer rejects or fails on the generated SVG.

    This is an engine bug or resource failure, never the requester's fault;
    the original exception is kept in ``__cause__``.
    """

    code = Code.RENDER_FAILED
