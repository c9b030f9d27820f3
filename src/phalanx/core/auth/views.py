"""What a cluster-wide view (nodes, node caches, queue usage) may name: only objects of namespaces the caller reads.

Nodes and Queues are cluster-scoped: every role reads them (``deciding``), since a tenant must see the machines
and the queue its jobs wait for. But what they hold belongs to tenants: which job holds a GPU, which Dataset a
node caches, which jobs wait in a queue. The rule, one for every such view:

- a ``namespace/name`` is shown as it is when the caller may *get TrainingJobs* in that namespace (the reading
  right a viewer has there); otherwise it is ``IN_USE`` (a holder: a GPU or a cache entry is held, by whom is not
  said) or ``HIDDEN`` (an object's own name: a cached Dataset), and lists count such objects without naming them;
- what names a Dataset without its namespace (a node's ``dataset.phalanx.dev/<name>`` labels, which the cache
  writes so the scheduler can prefer nodes that hold a version) is shown only to a caller who reads every
  namespace: the namespace it belongs to cannot be told from the label.

Nothing here reads a token: ``may_name`` decides for a ``Grant``; a server whose authorization is a hook (the
REST app's ``Authorize``) asks the same question of it (``NAMING_VERB`` on ``NAMING_KIND`` in the namespace).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from phalanx.core.auth.deciding import authorize
from phalanx.core.auth.grants import ALL_NAMESPACES, Grant, Verb

IN_USE = "in use"
"""What a view shows for a holder (a job holding a GPU, pinning a cache entry) the caller may not name."""
HIDDEN = "hidden"
"""What a view shows for an object's name (a cached Dataset) of a namespace the caller does not read."""
NAMING_VERB = Verb.GET
NAMING_KIND = "TrainingJob"
"""A view names an object of a namespace where the caller may ``get`` TrainingJobs (a viewer's right there)."""

Readable = Callable[[str], bool]
"""Whether the caller reads a namespace (``*``: every namespace)."""


def may_name(grant: Grant | None, namespace: str) -> bool:
    """Whether a view shown to ``grant`` may name objects of ``namespace`` (``*``: of every namespace)."""
    return authorize(grant, NAMING_VERB, NAMING_KIND, namespace).allowed


def shown_name(qualified: str, readable: Readable, *, hidden: str = IN_USE) -> str:
    """``namespace/name`` as the caller may see it: itself, or ``hidden`` when the namespace is not theirs.

    A name without a namespace (no ``/``) cannot be placed in one: only a caller of every namespace sees it.
    """
    namespace, slash, _ = qualified.partition("/")
    visible = readable(namespace) if slash else readable(ALL_NAMESPACES)
    return qualified if visible else hidden


def shown_names(qualified: Iterable[str], readable: Readable) -> tuple[list[str], int]:
    """The names the caller may see, in order, and how many others there are (counted, not named)."""
    shown: list[str] = []
    others = 0
    for name in qualified:
        if shown_name(name, readable) == name:
            shown.append(name)
        else:
            others += 1
    return shown, others
