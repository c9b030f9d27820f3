"""Pure data: the API objects of group ``phalanx.dev/v1alpha1``, resources, validation, defaults, YAML I/O.

Nothing here imports any other part of Phalanx.
"""
