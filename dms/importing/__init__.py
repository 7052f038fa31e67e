"""Importing a file tree: ``dms import`` and :func:`import_tree`.

Folders become folders, files documents with a first revision (SHA-256, size, normalised MIME
type), their bytes content-addressed blobs, and each revision gets its verification job in the
same transaction. Resumable, with a policy for names that collide or that the rules refuse,
and a report of everything renamed or skipped. ``docs/import.md`` tells the whole story.

Modules by role: :mod:`.walk` (the source tree), :mod:`.files` (reading a file),
:mod:`.names` (the naming policy), :mod:`.pipeline` (reading the tree in batches, a stage
ahead of the database), :mod:`.plan` (what each entry becomes), :mod:`.writes` (a planned
batch's rows), :mod:`.importer` (the stages run, one transaction per batch), :mod:`.report`
(the outcome).
"""

from .importer import import_tree
from .names import NamePolicy, readable_name
from .report import Action, Counts, ImportProgress, ImportReport, ReportEntry, SkipReason, Timings

__all__ = [
    "Action",
    "Counts",
    "ImportProgress",
    "ImportReport",
    "NamePolicy",
    "ReportEntry",
    "SkipReason",
    "Timings",
    "import_tree",
    "readable_name",
]
