"""Deliveries: each submitted delivery's record, its retained result, the runs it joined, and its evidence.

The facade: the :class:`DeliveryStore` (idempotent submission, crashed runs counted honestly, ``store.py`` over
the delivery log, ``delivery_log.py``, and its line format, ``record.py``), the verdict :func:`reckon` gives a
re-submission (:class:`Answer`, :class:`Conflict`, :class:`Poison`, else run it), and the content-free
:class:`Evidence` of each delivery's life.
"""

from service.captain.deliveries.evidence import Evidence
from service.captain.deliveries.store import Answer, Conflict, DeliveryStore, Poison, Retained, fingerprint, reckon

__all__ = ["Answer", "Conflict", "DeliveryStore", "Evidence", "Poison", "Retained", "fingerprint", "reckon"]
