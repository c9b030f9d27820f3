"""Pipeline decisions, pure: references, the DAG check and order, parameter binding, cache keys, run planning.

``references`` parses ``{{...}}`` and ``when``; ``parameters`` binds a run's arguments to the pipeline's
parameters; ``dag`` checks a pipeline as a whole and orders its steps; ``cache`` computes step cache keys;
``plan`` decides what a run does next. The I/O around them (reading components, hashing artifacts, starting jobs)
lives in adapters and services.
"""
