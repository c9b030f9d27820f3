"""The job history: finished, deleted and TTL-removed jobs kept in SQLite or PostgreSQL (SQLAlchemy + Alembic).

``records`` is the plain data a caller passes and gets back (importable without the ``history`` extra), ``schema``
the table, ``migrations`` its Alembic revisions (run at open), ``store`` the database operations (it needs
SQLAlchemy and Alembic). What to record and when is the recorder's (``services.history``): this package only
keeps and answers.
"""
