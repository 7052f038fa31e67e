"""Fleet machinery: running one task per tenant over thousands of tenants, and saying how it went.

Nothing here knows what the task does (that is :mod:`dms.migrations` and
:mod:`dms.provisioning`): :mod:`dms.fleet.pool` runs tasks on worker processes and stops
cleanly, :mod:`dms.fleet.progress` shows a bar or log lines, :mod:`dms.fleet.report` holds
what each tenant ended as.
"""

from dms.fleet.arguments import AUTO_JOBS, Jobs
from dms.fleet.progress import BarProgress, LogProgress, NoProgress, Progress, progress_for
from dms.fleet.report import FleetReport, Outcome, TenantReport

__all__ = [
    "AUTO_JOBS",
    "BarProgress",
    "FleetReport",
    "Jobs",
    "LogProgress",
    "NoProgress",
    "Outcome",
    "Progress",
    "TenantReport",
    "progress_for",
]
