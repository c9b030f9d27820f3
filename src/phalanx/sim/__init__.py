"""The simulator: discrete events on a virtual clock driving the same scheduler core as the runtimes.

A simulated run replays a trace or a generated workload on a simulated cluster through
``phalanx.core.scheduling.SchedulingSession``, the scheduler the embedded runtime and the Kubernetes scheduler
call, and measures what users feel (job completion time, queueing delay) and what operators pay for (GPU
allocation, GPUs held idle by partial gangs). ``phalanx sim run`` is its command; ``docs/simulator.md`` its
guide.

- ``traces``: loaders of the openb pod/node lists and the ITP job lists, with errors naming file, line, column;
- ``clusters``: ``ClusterSnapshot``s from the openb node list or synthetic N x G GPU nodes;
- ``workloads``: ``SimJob``s from ITP rows, Poisson and FfDL-like generators (seeded);
- ``engine``: ``simulate(cluster, jobs, options)``, the event loop (gang or pod-by-pod);
- ``metrics``: JCT, queueing delay, allocation, makespan, partial-gang waste, as ``METRICS`` columns;
- ``report``: ``report.md``, CSVs and plots of several runs.

Nothing is imported here, so ``import phalanx.sim`` costs nothing; import the modules you use.
"""
