"""Pipeline decisions, pure: references, the DAG, parameters, cache keys, run planning, component command lines.

``references`` parses ``{{...}}`` and ``when``; ``parameters`` binds a run's arguments to the pipeline's
parameters; ``dag`` checks a pipeline as a whole and orders its steps; ``cache`` computes step cache keys;
``plan`` decides what a run does next; ``placeholders`` resolves a KFP v1 component's command line. The I/O around
them (reading components, hashing artifacts, starting jobs) lives in adapters and services.
"""
