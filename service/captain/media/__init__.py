"""Media: the pictures of inbound messages, fetched under strict limits, kept privately, shown to the model.

The facade: the :class:`ImageFetcher` and its :class:`FetchPolicy`, a turn's :class:`TurnImages` (none:
:data:`NO_TURN_IMAGES`) and each message's :class:`InboundImages`, and :data:`OVER_STEER_LIMIT` (why a steered
message's pictures were not shown). Behind it: the fetch and store (``inbound.py``) and an image's pixel size
from its header (``image_size.py``).
"""

from service.captain.media.inbound import (
    NO_TURN_IMAGES,
    OVER_STEER_LIMIT,
    FetchPolicy,
    ImageFetcher,
    InboundImages,
    TurnImages,
)

__all__ = ["NO_TURN_IMAGES", "OVER_STEER_LIMIT", "FetchPolicy", "ImageFetcher", "InboundImages", "TurnImages"]
