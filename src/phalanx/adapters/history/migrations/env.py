"""Alembic's environment for the job history: it migrates over the connection ``HistoryStore`` hands it.

Never run from a command line with an ``alembic.ini``: the store opens the database and passes the connection in
``config.attributes["connection"]``, so the URL (and any password in it) goes through one place.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
