"""Pure logic: lifecycle, reconciling, scheduling.

No I/O, no wall clock, no environment: every input is a
parameter, every effect a returned decision, so the same code serves the embedded runtime, Kubernetes and the
simulator, and tests run on virtual time.
"""
