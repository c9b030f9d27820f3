"""Pure decisions for pipelines: the step graph, cache keys, run planning and component command lines."""
