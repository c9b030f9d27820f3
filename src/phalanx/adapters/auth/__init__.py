"""Authentication adapters: where API tokens are kept (``token_store``, a SQLite file of the state directory)."""
