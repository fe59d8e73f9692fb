"""Spend: the service's money. Day budgets before every model call, the spend ledger, cache lifetimes by pace.

The facade: :class:`Spending` (built once by the service; every lane's model calls pass its
:class:`LaneMeter`), :func:`budget_key` (an operator's budget name) and the :data:`NOTICE` a room hears when
today's budget is spent; :class:`FileSpendLedger`, the ledger's day files (``clankie migrate`` reads them).
Behind it, pure: the day budgets (``budget.py``), the ledger's lines and prices
(``ledger.py``), and the cache lifetime chosen by a lane's pace (``cache_lifetime.py``; the provider's rate-limit
pacing is another matter, :mod:`service.agent.pacing`). The spend shared with the supervisor stays in the kernel
(:mod:`clankie.spend`, :mod:`clankie.settings_spend`) and the supervisor's day count in
:mod:`supervisor.spend_today`: ``docs/spend.md``, "Where the money is", says why.
"""

from service.captain.spend.ledger_files import FileSpendLedger
from service.captain.spend.spending import NOTICE, LaneMeter, Spending, budget_key

__all__ = ["NOTICE", "FileSpendLedger", "LaneMeter", "Spending", "budget_key"]
