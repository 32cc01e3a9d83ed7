"""A run's status for people: the store's one rule (`theseus.store.status`), which ``theseus ls``,
``theseus show`` and ``Store.runs()`` apply too, so the UI never says ``stale`` where they say
``running``.

>>> run_status("running", None, written=0, now=(STALE_AFTER_S + 1) * 10**9)
'stale'
"""

from __future__ import annotations

from theseus.store.status import INSPECTION, STALE_AFTER_S, STATUSES, run_status

__all__ = ["INSPECTION", "STALE_AFTER_S", "STATUSES", "run_status"]
