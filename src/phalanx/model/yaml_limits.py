"""Reading YAML within the limits of one spec file, and measuring parsed documents against the same limits.

A 600-byte file of nested aliases ("billion laughs") expands to billions of values; 10,000 ``[`` nest deeper than
any recursive walker survives. The limits (``MAX_DOCUMENTS``, ``MAX_DEPTH``, ``MAX_VALUES``) are enforced while the
file is *composed* into its node graph, where an alias is still one shared node: each node's size once expanded
is counted when it is composed and remembered, so an alias costs one lookup and counting costs what composing
does. Every document of a file is composed, and so checked, before any is constructed into Python objects.

Duplicate mapping keys are refused here too, with their path and lines: YAML parsers keep the last of two equal
keys, so a second ``spec:`` silently replaced the first. Keys are compared as they are read (``1`` and ``0x1``
are the same key), as the dict being built would compare them.

Documents that arrive parsed (JSON through the local API, mappings through the SDK) are measured by
``measure_documents``, iteratively, before validation walks them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

MAX_DOCUMENTS = 500
"""Documents in one file (or one submission): a file of specs is written by hand or by a script, not a dump."""

MAX_DEPTH = 100
"""Levels of nested lists and mappings (aliases expanded): a spec nests about 8; recursion stays far from 1,000."""

MAX_VALUES = 100_000
"""Scalars, lists and mappings (keys included) in one file once aliases are expanded: a large spec holds 1,000."""

_MERGE_TAG = "tag:yaml.org,2002:merge"
_MAX_INT_DIGITS = 4300  # Python's own bound on int(str): past it int() raises a ValueError


class LimitExceededError(yaml.YAMLError):
    """The file passes a limit; the message is one sentence naming the file, the document and the limit."""


def too_deep(where: str, position: int, at: str = "") -> str:
    """The sentence for a document nested past ``MAX_DEPTH``."""
    return (
        f"{where}document {position} nests lists and mappings more than {MAX_DEPTH} deep{at}; "
        f"at most {MAX_DEPTH} levels are allowed"
    )


class _LimitedComposer(Composer):
    """PyYAML's composer, counting what each node expands to and refusing past a limit.

    ``measures`` maps a node (by id, while its document is composed) to its size and its height once aliases are
    expanded; a node being composed has none yet, so an alias to it is a cycle.
    """

    if TYPE_CHECKING:  # the parser's, which comes with it in LimitedLoader

        def peek_event(self) -> Any: ...

        def check_event(self, *choices: Any) -> bool: ...

    def __init__(self, source: str) -> None:
        Composer.__init__(self)
        self.source = source
        self.document = 0
        self.values = 0
        self.depth = 0
        self.measures: dict[int, tuple[int, int]] = {}
        self.path: list[str | int] = []
        self.duplicates: list[tuple[int, str, str]] = []  # (document, key path, message)

    def compose_document(self) -> Node | None:
        self.document += 1
        if self.document > MAX_DOCUMENTS:
            line = self.peek_event().start_mark.line + 1
            raise LimitExceededError(
                f"{self.source} holds more than {MAX_DOCUMENTS} documents (document {self.document} starts at line "
                f"{line}); split it into files of at most {MAX_DOCUMENTS}"
            )
        self.measures = {}
        with self._nesting_of_libyaml():
            node: Node | None = super().compose_document()
        return node

    def check_node(self) -> bool:
        with self._nesting_of_libyaml(ahead=True):
            more: bool = super().check_node()
        return more

    @contextmanager
    def _nesting_of_libyaml(self, *, ahead: bool = False) -> Iterator[None]:
        # libyaml's scanner reads a run of '[' ahead of the parser and stops at its own bound of 1,000 levels,
        # past ours: that gets our sentence, at the line where libyaml stopped.
        try:
            yield
        except yaml.MarkedYAMLError as err:
            if err.problem == "exceeded maximum nesting depth" and err.problem_mark is not None:
                self.document += ahead  # read ahead, from the next document
                self._too_deep(err.problem_mark)
            raise

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None:
                measure = self.measures.get(id(target))
                if measure is None:
                    raise LimitExceededError(
                        f"{self.source}: document {self.document} uses the alias *{event.anchor} inside the value it "
                        f"names (at line {event.start_mark.line + 1}), a value without end; remove the alias"
                    )
                self._count(measure[0], event.start_mark)
                if self.depth + measure[1] > MAX_DEPTH:
                    self._too_deep(event.start_mark)
            return super().compose_node(parent, index)
        if isinstance(parent, SequenceNode):
            self.path.append(index)
        elif isinstance(parent, MappingNode):
            # The key's own node (index is None) has no path of its own; its value's is the key.
            self.path.append(index.value if isinstance(index, ScalarNode) else "?")
        try:
            return super().compose_node(parent, index)
        finally:
            if parent is not None:
                self.path.pop()

    def compose_scalar_node(self, anchor: Any) -> ScalarNode:
        self._count(1, self.peek_event().start_mark)
        node = super().compose_scalar_node(anchor)
        self.measures[id(node)] = (1, 0)
        return node

    def compose_sequence_node(self, anchor: Any) -> SequenceNode:
        node: SequenceNode = self._compose_collection(super().compose_sequence_node, anchor)
        self._measure(node, [child for child in node.value])
        return node

    def compose_mapping_node(self, anchor: Any) -> MappingNode:
        node: MappingNode = self._compose_collection(super().compose_mapping_node, anchor)
        self._measure(node, [part for pair in node.value for part in pair])
        self._find_duplicates(node)
        return node

    def _compose_collection(self, compose: Any, anchor: Any) -> Any:
        mark = self.peek_event().start_mark
        self._count(1, mark)
        if self.depth + 1 > MAX_DEPTH:
            self._too_deep(mark)
        self.depth += 1
        try:
            node = compose(anchor)
        finally:
            self.depth -= 1
        return node

    def _measure(self, node: Node, children: list[Node]) -> None:
        sizes = [self.measures[id(child)] for child in children]
        self.measures[id(node)] = (1 + sum(s for s, _ in sizes), 1 + max((h for _, h in sizes), default=0))

    def _count(self, values: int, mark: Any) -> None:
        self.values += values
        if self.values > MAX_VALUES:
            raise LimitExceededError(
                f"{self.source}: document {self.document} takes the file past {MAX_VALUES:,} values once its "
                f"aliases are expanded (at line {mark.line + 1}); at most {MAX_VALUES:,} are allowed"
            )

    def _too_deep(self, mark: Any) -> None:
        raise LimitExceededError(too_deep(f"{self.source}: ", self.document, f" (at line {mark.line + 1})"))

    def _find_duplicates(self, node: Node) -> None:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue  # a merge key may be overridden; a complex key is rare and compared by the dict
            key = self._key_of(key_node)
            line = key_node.start_mark.line + 1
            if key not in seen:
                seen[key] = line
                continue
            first = seen[key]
            where = f"on line {line}" if first == line else f"at lines {first} and {line}"
            path = [*self.path, key_node.value]
            self.duplicates.append((self.document, _join(path), f"key given twice, {where}; keep one of them"))

    def _key_of(self, node: ScalarNode) -> Any:
        # As written; the loader compares keys as read.
        return (node.tag, node.value)


def _join(parts: Sequence[str | int]) -> str:
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


# The C parser when PyYAML was built with libyaml (several times faster), else the pure-Python reader, scanner
# and parser. The composer above comes first in the bases, so that its methods win over the C composer's.
if yaml.__with_libyaml__:
    from yaml._yaml import CParser as _Parser
else:  # pragma: no cover - PyYAML without libyaml

    class _Parser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)


class LimitedLoader(_LimitedComposer, _Parser, SafeConstructor, Resolver):
    """A safe loader that composes within the limits and refuses duplicate keys.

    Values it cannot read (a date with month 13, a number of 5,000 digits) are YAML errors with their line, not
    tracebacks.
    """

    def __init__(self, text: str, *, source: str) -> None:
        _Parser.__init__(self, text)
        _LimitedComposer.__init__(self, source)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)

    def _key_of(self, node: ScalarNode) -> Any:
        try:
            key = self.construct_object(node)
            hash(key)
        except (yaml.YAMLError, TypeError):
            return (node.tag, node.value)  # the constructor reports it when the document is read
        return key

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        """The constructor's value of ``node``; a ``ValueError`` of Python's becomes a YAML error at its line."""
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as err:
            shown = node.value if isinstance(node.value, str) and len(node.value) <= 40 else None
            problem = f"cannot read {shown!r}: {err}" if shown is not None else f"cannot read this value: {err}"
            raise ConstructorError(None, None, problem, node.start_mark) from None

    def construct_yaml_int(self, node: ScalarNode) -> int:
        """An integer, refused with its line past the digits ``int()`` reads."""
        digits = sum(char.isdigit() for char in node.value)
        if digits > _MAX_INT_DIGITS:
            raise ConstructorError(
                None, None, f"a whole number of {digits} digits; at most {_MAX_INT_DIGITS} are allowed", node.start_mark
            )
        value: int = super().construct_yaml_int(node)
        return value

    yaml_constructors = {**SafeConstructor.yaml_constructors, "tag:yaml.org,2002:int": construct_yaml_int}


def measure_documents(documents: Sequence[Any], *, source: str | None) -> None:
    """Refuse parsed documents past the limits of a file, walking them without recursion.

    A value shared by several places counts once per use, so the Python form of an alias bomb is refused too; a
    value that contains itself is too deep.

    Raises:
        LimitExceededError: one sentence naming the document and the limit.
    """
    where = f"{source}: " if source else ""
    if len(documents) > MAX_DOCUMENTS:
        raise LimitExceededError(
            f"{where}{len(documents)} documents were given; at most {MAX_DOCUMENTS} are allowed in one submission"
        )
    values = 0
    for position, document in enumerate(documents, start=1):
        stack: list[tuple[Any, int]] = [(document, 1)]
        values += 1
        while stack:
            value, depth = stack.pop()
            if isinstance(value, dict):
                count = 2 * len(value)  # keys are values too, as in a file
            elif isinstance(value, list | tuple):
                count = len(value)
            else:
                continue
            if depth > MAX_DEPTH:
                raise LimitExceededError(too_deep(where, position))
            values += count
            if values > MAX_VALUES:
                raise LimitExceededError(
                    f"{where}document {position} takes the submission past {MAX_VALUES:,} values; "
                    f"at most {MAX_VALUES:,} are allowed"
                )
            items = (part for pair in value.items() for part in pair) if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items)
