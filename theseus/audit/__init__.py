"""Audit a root offline and collect its garbage: ``theseus audit`` / ``theseus gc``, without JAX.

``root`` holds the two entry points (``audit``, ``gc``) and reads the log, the views and
the runs; ``checkpoints`` checks each checkpoint against its MANIFEST.json (whose format
is ``store/manifest.py``'s); ``report`` holds what they return; ``reading`` the helpers
they share.

>>> import tempfile
>>> audit(tempfile.mkdtemp()).ok
True
"""

from theseus.audit.report import AuditReport, Change, CheckpointAudit, GcReport, Problem, Resume, RunAudit
from theseus.audit.root import audit, flatten, gc

__all__ = ["AuditReport", "Change", "CheckpointAudit", "GcReport", "Problem", "Resume", "RunAudit", "audit", "flatten",
           "gc"]
