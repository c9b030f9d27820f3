"""Turning a KFP v1 component's command line into the argv and environment of one run of it (pure).

Input: the parsed component (``model.kfp_component``), the argument values, the local paths of the inputs
given as files (artifacts of earlier steps), where value inputs are to be written when the program reads them as
files, and the paths the outputs are to be written to. Output: the final ``command``, ``args`` and ``env``
strings, the files the caller must write first (a value read through ``inputPath``, as KFP v1 does for constant
arguments), and which inputs and outputs were actually used, so the caller stages and collects exactly those.
Nothing here touches a file.

Semantics follow the KFP 1.8 SDK's resolver (``_components.py``):

- an input is *present* when it has a value or is given as a file (an artifact); an input with a ``default``
  and neither is present with its default (the SDK fills defaults in before resolving, so ``isPresent`` is
  true for it); a required input (no default, not ``optional``) that is absent is an error;
- ``inputValue``/``inputPath`` of an absent optional input resolve to nothing: the item is dropped from the list
  (and from a ``concat``), it is not an empty string;
- ``if`` picks ``then`` or ``else`` (nothing when ``else`` is missing) and splices its items into the list;
  ``cond`` is a boolean, a boolean word (``true``/``false``/``yes``/``no``/``1``/``0``... as ``strtobool``), an
  ``isPresent``, or an ``inputValue`` whose value is such a word (an absent optional input reads as false);
- ``concat`` joins its resolved items into one string;
- an ``inputValue`` of an input given only as a file (an artifact from another step) is refused: its content
  lives in a file, so the component must read it with ``inputPath``; the caller that wants to pass a small
  artifact by value reads it and passes the text as the value.

An ``env`` value must resolve to exactly one string, or to nothing (the variable is then left out).

``{executorInput: {}}`` (kfp v2 lightweight Python components) resolves to the ``executor_input`` text the caller
made with ``core.pipelines.kfp_executor.executor_input``: that JSON carries every input and every output path, so
each input given counts as used (values by value, artifacts by path) and each output with a path as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from phalanx.model.errors import FieldError, SpecError, join_path, short
from phalanx.model.kfp_component import ComponentSpec, file_name_of
from phalanx.model.kfp_placeholders import (
    FALSE_WORDS,
    TRUE_WORDS,
    Argument,
    ConcatPlaceholder,
    Condition,
    ExecutorInputPlaceholder,
    IfPlaceholder,
    InputPathPlaceholder,
    InputValuePlaceholder,
    IsPresentPlaceholder,
    OutputPathPlaceholder,
)

Loc = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class ResolvedCommand:
    """What one run of a component executes, with every placeholder replaced."""

    command: tuple[str, ...]
    args: tuple[str, ...]
    env: Mapping[str, str]
    #: inputs whose value went into the command line or environment
    inputs_by_value: frozenset[str]
    #: input name → the local path the program reads
    inputs_by_path: Mapping[str, str]
    #: path → text: value inputs the program reads as files; the caller writes each before starting the program
    value_files: Mapping[str, str]
    #: output name → the local path the program writes (``outputPath``, then the legacy ``fileOutputs``)
    outputs_by_path: Mapping[str, str]


def default_paths(
    component: ComponentSpec, *, inputs_dir: str, outputs_dir: str
) -> tuple[dict[str, str], dict[str, str]]:
    """KFP v1's layout under two folders: ``<inputs_dir>/<name>/data`` and ``<outputs_dir>/<name>/data``.

    Names are made file names as upstream does (``eval data`` → ``eval_data``); ``parse_component`` refuses two
    inputs (or outputs) that would share one.
    """
    inputs = {item.name: str(PurePosixPath(inputs_dir, file_name_of(item.name), "data")) for item in component.inputs}
    outputs = {
        item.name: str(PurePosixPath(outputs_dir, file_name_of(item.name), "data")) for item in component.outputs
    }
    return inputs, outputs


def resolve_command(
    component: ComponentSpec,
    *,
    values: Mapping[str, str],
    artifacts: Mapping[str, str],
    input_paths: Mapping[str, str],
    output_paths: Mapping[str, str],
    prefix: Sequence[str | int] = (),
    arguments_at: Sequence[str | int] = ("arguments",),
    executor_input: str | None = None,
) -> ResolvedCommand:
    """The command line and environment of ``component`` run with these arguments.

    Args:
        component: the parsed component.
        values: input name → its value as a string (the step's arguments, parameters already substituted).
        artifacts: input name → the local path of its data, for inputs given as files (an earlier step's
            output): such an input is present, and ``inputPath`` reads it there.
        input_paths: input name → where a value input is written if the program reads it with ``inputPath``
            (``default_paths`` gives KFP's layout; entries for inputs never read as files are unused).
        output_paths: output name → the local path the program is to write it to.
        prefix: path parts put before a component path in errors (``spec.steps[2].component``).
        arguments_at: the path of the arguments mapping, for errors about a missing or unknown argument.
        executor_input: what ``{executorInput: {}}`` resolves to (``kfp_executor.executor_input``'s JSON); a
            component using that placeholder without it is an error.

    Raises:
        SpecError: every problem, each naming the placeholder or argument by path.
    """
    resolver = _Resolver(component, values, artifacts, input_paths, output_paths, tuple(prefix), executor_input)
    for name in [*values, *(name for name in artifacts if name not in values)]:
        if component.input(name) is None:
            known = [item.name for item in component.inputs]
            resolver.fail((*arguments_at, name), _no_such("input", name, known), in_component=False)
    for name in values:
        if name in artifacts:
            message = f"input {name!r} is given both a value and a file; pass one of them"
            resolver.fail((*arguments_at, name), message, in_component=False)
    for item in component.inputs:
        if not item.optional and item.default is None and item.name not in values and item.name not in artifacts:
            resolver.fail(
                (*arguments_at, item.name),
                f"the component's input {item.name!r} is required; pass an argument for it "
                "(or give the input a default, or optional: true)",
                in_component=False,
            )
    container = component.implementation.container
    base: Loc = ("implementation", "container")
    command = resolver.expand_list(container.command or [], (*base, "command"))
    args = resolver.expand_list(container.args or [], (*base, "args"))
    env: dict[str, str] = {}
    for key, value in (container.env or {}).items():
        parts = resolver.expand(value, (*base, "env", key))
        if len(parts) > 1:
            resolver.fail((*base, "env", key), f"resolves to {len(parts)} strings; an environment value is one")
        elif parts:
            env[key] = parts[0]
    for name, path in (container.file_outputs or {}).items():
        resolver.outputs.setdefault(name, path)
    if resolver.errors:
        raise SpecError(resolver.errors)
    return ResolvedCommand(
        command=tuple(command),
        args=tuple(args),
        env=env,
        inputs_by_value=frozenset(resolver.by_value),
        inputs_by_path=dict(resolver.by_path),
        value_files=dict(resolver.value_files),
        outputs_by_path=dict(resolver.outputs),
    )


def _no_such(kind: str, name: str, known: Sequence[str]) -> str:
    listed = ", ".join(repr(item) for item in known) if known else "none"
    return f"the component has no {kind} {name!r} (its {kind}s: {listed}); remove it or fix the name"


@dataclass
class _Resolver:
    component: ComponentSpec
    values: Mapping[str, str]
    artifacts: Mapping[str, str]
    input_paths: Mapping[str, str]
    output_paths: Mapping[str, str]
    prefix: Loc
    executor_input: str | None
    errors: list[FieldError] = field(default_factory=list)
    by_value: set[str] = field(default_factory=set)
    by_path: dict[str, str] = field(default_factory=dict)
    value_files: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)

    def fail(self, loc: Sequence[str | int], message: str, *, in_component: bool = True) -> None:
        where = [*self.prefix, *loc] if in_component else list(loc)
        self.errors.append(FieldError(join_path(where), message))

    def expand_list(self, items: Sequence[Argument], loc: Loc) -> list[str]:
        expanded: list[str] = []
        for index, item in enumerate(items):
            expanded += self.expand(item, (*loc, index))
        return expanded

    def expand(self, item: Argument, loc: Loc) -> list[str]:
        """Zero, one or several strings: an absent optional input gives none, an ``if`` its branch's items."""
        if isinstance(item, str):
            return [item]
        if isinstance(item, InputValuePlaceholder):
            value = self.value_of(item.input_value, (*loc, "inputValue"))
            return [] if value is None else [value]
        if isinstance(item, InputPathPlaceholder):
            return self.path_of(item.input_path, (*loc, "inputPath"))
        if isinstance(item, OutputPathPlaceholder):
            path = self.output_paths.get(item.output_path)
            if path is None:
                self.fail((*loc, "outputPath"), f"no path was given for output {item.output_path!r}")
                return []
            self.outputs[item.output_path] = path
            return [path]
        if isinstance(item, ConcatPlaceholder):
            return ["".join(self.expand_list(item.concat, (*loc, "concat")))]
        if isinstance(item, ExecutorInputPlaceholder):
            return self.whole_executor_input((*loc, "executorInput"))
        if isinstance(item, IfPlaceholder):
            body = item.if_
            taken = self.holds(body.cond, (*loc, "if", "cond"))
            branch, parts = ("then", body.then) if taken else ("else", body.else_)
            return self.expand_list(parts or [], (*loc, "if", branch))
        raise TypeError(f"not a command-line item: {short(item)}")  # parse_component admits no other kind

    def whole_executor_input(self, loc: Loc) -> list[str]:
        """The ExecutorInput JSON; every input given and every output with a path travel in it."""
        if self.executor_input is None:
            self.fail(loc, "the component reads KFP's executor input, but none was given for this run")
            return []
        self.by_value.update(self.values)
        self.by_path.update(self.artifacts)
        for output in self.component.outputs:
            if output.name in self.output_paths:
                self.outputs[output.name] = self.output_paths[output.name]
        return [self.executor_input]

    def present(self, name: str) -> bool:
        spec = self.component.input(name)
        has_default = spec is not None and spec.default is not None
        return name in self.values or name in self.artifacts or has_default

    def value_of(self, name: str, loc: Loc) -> str | None:
        """The input's value, its default, or None for an absent optional input (refused for a file-only one)."""
        if name in self.values:
            value = self.values[name]
            if "\x00" in value:
                # execve cuts a string at a NUL: the program would silently get a shorter value.
                self.fail(
                    loc, f"the value of input {name!r} holds a NUL byte (\\x00), which a command line cannot carry"
                )
                return None
            self.by_value.add(name)
            return value
        if name in self.artifacts:
            self.fail(
                loc,
                f"input {name!r} is given as a file (an artifact), not a value; read it with "
                f"{{inputPath: {name}}}, or pass a value for it",
            )
            return None
        spec = self.component.input(name)
        if spec is not None and spec.default is not None:
            self.by_value.add(name)
            return spec.default
        return None  # absent optional (an absent required one is reported once, at its argument)

    def path_of(self, name: str, loc: Loc) -> list[str]:
        """An artifact's own path, or the path a value (or default) is written to; nothing when absent."""
        if name in self.artifacts:
            self.by_path[name] = self.artifacts[name]
            return [self.artifacts[name]]
        value = self.values.get(name)
        if value is None:
            spec = self.component.input(name)
            value = None if spec is None else spec.default
        if value is None:
            return []  # absent optional (an absent required one is reported once, at its argument)
        path = self.input_paths.get(name)
        if path is None:
            self.fail(loc, f"no local path was given for input {name!r}, which the program reads as a file")
            return []
        self.by_path[name] = path
        self.value_files[path] = value
        return [path]

    def holds(self, cond: Condition, loc: Loc) -> bool:
        if isinstance(cond, bool):
            return cond
        if isinstance(cond, IsPresentPlaceholder):
            return self.present(cond.is_present)
        if isinstance(cond, InputValuePlaceholder):
            value = self.value_of(cond.input_value, (*loc, "inputValue"))
            if value is None:
                return False  # upstream: an absent optional input makes the condition false
            word = self.word(value, (*loc, "inputValue"), f"the value of input {cond.input_value!r}")
            return word
        return self.word(cond, loc, "the condition")

    def word(self, text: str, loc: Loc, what: str) -> bool:
        lowered = text.strip().lower()
        if lowered in TRUE_WORDS:
            return True
        if lowered not in FALSE_WORDS:
            self.fail(loc, f"{what} is {short(text)}, which is neither true nor false; pass true or false")
        return False
