"""The study's plumbing: the results contract, the papermill runner and the claims ledger."""

from normlab.study.findings import Finding
from normlab.study.results import VERDICTS, Results, decide

__all__ = ["VERDICTS", "Finding", "Results", "decide"]
