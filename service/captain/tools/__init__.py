"""Tools: what the model may call during a turn, and the clients of the hosts some of them drive.

The facade: each tool's constructor (a text update, a screenshot, a diagram, the privileged shell) and the
:func:`redacted` wrapper every one passes, what a tool knows of its turn (:class:`TurnCapture`,
:class:`DeliveryContext`, :class:`Admission`), and the :class:`HostClient` / :class:`ImportingClient` of the
browser and tldraw hosts. Behind it: ``model_tools.py`` and ``hosts.py``.
"""

from service.captain.tools.hosts import HostClient, ImportingClient
from service.captain.tools.model_tools import (
    Admission,
    DeliveryContext,
    TurnCapture,
    diagram_tool,
    redacted,
    screenshot_tool,
    shell_tool,
    text_update_tool,
)

__all__ = [
    "Admission",
    "DeliveryContext",
    "HostClient",
    "ImportingClient",
    "TurnCapture",
    "diagram_tool",
    "redacted",
    "screenshot_tool",
    "shell_tool",
    "text_update_tool",
]
