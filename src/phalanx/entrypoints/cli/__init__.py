"""The ``phalanx`` command line, kubectl-style: tables for people, ``-o yaml|json`` for scripts."""
