"""Alembic's migrations of the job history (``env.py`` and ``versions/``), run by ``HistoryStore`` at open."""
