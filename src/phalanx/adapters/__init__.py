"""Adapters: everything that touches the outside world, each behind a small interface."""
