"""Helpers shared by the test tiers (importable as ``support`` through pytest's ``pythonpath``)."""
