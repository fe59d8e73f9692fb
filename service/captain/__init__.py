"""The captain: every Discord text room is a durable lane (ADR 0118); see ``docs/captain.md``.

Split by job, one subpackage each, and each subpackage's ``__init__`` is its facade (what a caller outside it
imports; ``tests/test_import_rules.py`` forbids reaching behind one): :mod:`~service.captain.lanes` (the
captain itself, each room's lane, its machine, shell and run), :mod:`~service.captain.deliveries` (idempotent
submission, the delivery log, the evidence), :mod:`~service.captain.spend` (money: day budgets, the spend
ledger, cache lifetimes by pace), :mod:`~service.captain.media` (inbound images) and
:mod:`~service.captain.tools` (the model's tools and the host clients behind them). Two modules sit beside
them: the turn service (:mod:`~service.captain.service`, the ``turn.submit`` handler over lanes and
deliveries) and how the small append-only files are written (:mod:`~service.captain.records`).
"""
