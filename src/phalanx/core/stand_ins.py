"""Image stand-ins: a local program that plays a container image on a runtime that runs no images.

The embedded runtime runs replicas as processes of the host, so an upstream file whose containers leave the
program to their image's entrypoint (``image`` and ``args``, no ``command``) cannot run there as written. A
stand-in (``phalanx run --stand-in IMAGE=PROGRAM``) names a local program that plays the image: every replica
whose image is IMAGE runs PROGRAM with the argv its container would run (its command, then its args) as arguments,
so one stand-in can play a launcher and its workers by looking at what it is asked to run. The file is not edited.

Decided here, once, for every backend (``services.operations``): the job's stored command becomes
``[*PROGRAM, *command]`` and its ``phalanx.dev/stand-ins`` annotation says which image which program played, so
``get -o yaml`` and ``describe`` show it afterwards. A backend that runs images (Kubernetes) refuses stand-ins.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from phalanx.model.base import validated_copy
from phalanx.model.jobs import TrainingJob

#: The annotation of a job some of whose images were played by stand-ins: one ``IMAGE=PROGRAM`` line each.
STAND_IN_ANNOTATION = "phalanx.dev/stand-ins"
FLAG = "--stand-in"
#: At most this many stand-ins per submission, each program of at most this many words (bounds for the API).
MAX_STAND_INS = 32
MAX_PROGRAM_WORDS = 64


@dataclass(frozen=True)
class StandIn:
    """IMAGE=PROGRAM: the program (its words, as a shell splits them) that plays an image."""

    image: str
    program: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.image}={shlex.join(self.program)}"


def parse_stand_in(text: str) -> StandIn:
    """``IMAGE=PROGRAM`` (PROGRAM split as a shell would: ``python3 play.py`` is two words).

    Raises:
        ValueError: the text is not IMAGE=PROGRAM, in one sentence with the fix.
    """
    image, equals, program = text.partition("=")
    image = image.strip()
    if not equals or not image or any(c.isspace() for c in image):
        raise ValueError(
            f"{FLAG} {text!r}: write IMAGE=PROGRAM, e.g. {FLAG} kubeflow/pytorch-dist-mnist:latest=./play-mnist.py"
        )
    try:
        words = tuple(shlex.split(program))
    except ValueError as err:
        raise ValueError(f"{FLAG} {text!r}: the program cannot be split into words ({err})") from None
    if not words:
        raise ValueError(f"{FLAG} {text!r}: name the program that plays {image}, e.g. {image}=./play.py")
    if len(words) > MAX_PROGRAM_WORDS:
        raise ValueError(f"{FLAG} {text!r}: at most {MAX_PROGRAM_WORDS} words; put the rest in a script")
    return StandIn(image, words)


def check_stand_ins(stand_ins: Mapping[str, Sequence[str]]) -> list[str]:
    """Problems with a map of image -> program words (as the local API receives it), one sentence each."""
    problems = []
    if len(stand_ins) > MAX_STAND_INS:
        problems.append(f"{FLAG}: at most {MAX_STAND_INS} stand-ins, got {len(stand_ins)}")
    for image, program in stand_ins.items():
        if not image or any(c.isspace() or c == "=" for c in image):
            problems.append(f"{FLAG} {image!r}: not an image name")
        elif not program or not program[0] or len(program) > MAX_PROGRAM_WORDS:
            problems.append(f"{FLAG} {image}: give the program as 1 to {MAX_PROGRAM_WORDS} words, the first not empty")
    return problems


def apply_stand_ins(job: TrainingJob, stand_ins: Mapping[str, Sequence[str]]) -> tuple[TrainingJob, set[str]]:
    """The job with each replica whose image has a stand-in running it; and the images that had one.

    A replica of image IMAGE runs ``[*PROGRAM, *command]`` with its args after them: the argv its container would
    run (the entrypoint's arguments, when it has no command) handed to the program. Raises ``ValueError`` when the
    result passes a bound of the model (too many argv items).
    """
    used: set[str] = set()
    replicas = dict(job.spec.replicas)
    for role, replica in job.spec.replicas.items():
        image = replica.template.image
        if image is None or image not in stand_ins:
            continue
        used.add(image)
        command = [*stand_ins[image], *replica.template.command]
        template = validated_copy(replica.template, command=command)
        replicas[role] = validated_copy(replica, template=template)
    if not used:
        return job, used
    lines = "\n".join(f"{image}={shlex.join(stand_ins[image])}" for image in sorted(used))
    metadata = validated_copy(job.metadata, annotations={**job.metadata.annotations, STAND_IN_ANNOTATION: lines})
    return validated_copy(job, metadata=metadata, spec=validated_copy(job.spec, replicas=replicas)), used


def played(job: TrainingJob) -> dict[str, str]:
    """Image -> the program that played it, as the job's ``phalanx.dev/stand-ins`` annotation says."""
    text = job.metadata.annotations.get(STAND_IN_ANNOTATION, "")
    found = {}
    for line in text.splitlines():
        image, _, program = line.partition("=")
        if image and program:
            found[image] = program
    return found
