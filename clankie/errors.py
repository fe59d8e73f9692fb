"""The error tree, split by who is at fault (pure: classes only, so every pure core may raise them).

Every error Clankie raises on purpose descends from :class:`ClankieError`.
The split follows h11 and trio: an error is either *ours* (a local bug or a
channel we closed), *theirs* (a peer that sent garbage or went away), or the
operator's (a configuration that cannot work).
"""

from __future__ import annotations

EX_CONFIG = 78
"""Exit status for "the configuration is wrong": the supervisor does not restart in a loop."""


class ClankieError(Exception):
    """Root of every error Clankie raises deliberately."""


class ConfigError(ClankieError):
    """Raised when settings or the environment cannot produce a working process.

    The process reports the message and exits with :data:`EX_CONFIG`; the
    supervisor shows it and does not restart the child in a loop.
    """


class ProtocolError(ClankieError):
    """Raised when a message on a link breaks the wire protocol.

    ``code`` is the stable snake_case code that goes on the wire.
    """

    code: str = "invalid_request"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class LocalProtocolError(ProtocolError):
    """Raised when *we* were about to send something invalid: a bug on our side."""


class RemoteProtocolError(ProtocolError):
    """Raised when the *peer* sent something invalid: a malformed frame or record.

    The receive boundary answers it with ``invalid_request`` where a msgid
    can be read, else drops the connection; other connections are untouched.
    """


class ChannelClosed(ClankieError):
    """Raised when using a channel that *we* closed (or are closing)."""


class ChannelBroken(ClankieError):
    """Raised when the *peer* went away: EOF, reset, or a protocol violation.

    The underlying cause, if any, is chained in ``__cause__``.
    """


class RemoteError(ClankieError):
    """Raised on the caller's side when the peer answered a request with an error.

    ``code`` is the stable snake_case code from the wire; ``message`` is
    human-readable and never contains secrets or message content.
    """

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class RequestTimeout(ClankieError):
    """Raised when a bounded request to another process ran out of time."""
