"""``python -m phalanx.entrypoints.cli``: the same as the ``phalanx`` command."""

from phalanx.entrypoints.cli.launcher import main

main()
