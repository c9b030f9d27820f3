"""The job history: finished, deleted and TTL-removed jobs kept in SQLite or PostgreSQL (SQLAlchemy + Alembic).

``records`` is the plain data a caller passes and gets back, ``schema`` the table, ``migrations`` its Alembic
revisions (run at open), ``store`` the database operations. What to record and when is the recorder's
(``services.history``): this package only keeps and answers.
"""

from phalanx.adapters.history.records import HistoryPage, HistoryQuery, JobRecord, QueueSummary
from phalanx.adapters.history.store import HistoryError, HistoryStore, database_url

__all__ = ["HistoryError", "HistoryPage", "HistoryQuery", "HistoryStore", "JobRecord", "QueueSummary", "database_url"]
