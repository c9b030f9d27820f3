"""Containers without a command (the image's entrypoint runs) and image stand-ins, at the one validation door.

A replica may leave its program to its image: on Kubernetes the Pod's container then has no command and runs the
image's entrypoint with the args. The embedded runtime runs no images, so it refuses such a replica at the path
where the command would be, naming the fix (a command, or ``--stand-in IMAGE=PROGRAM``). A stand-in is applied
once, here, for every backend: the replica runs PROGRAM with its container's command and args as arguments, and
the job's ``phalanx.dev/stand-ins`` annotation says so. A backend that runs images refuses stand-ins.
"""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.core.stand_ins import STAND_IN_ANNOTATION, apply_stand_ins, parse_stand_in, played
from phalanx.model.errors import SpecError
from phalanx.model.jobs import TrainingJob
from phalanx.model.loading import builtin_jobtypes
from phalanx.model.pods import EMBEDDED_REFUSALS
from phalanx.model.validation import validate_job
from phalanx.services.operations import Operations, validate_documents
from support.memory_backend import MemoryBackend

JOBTYPES = builtin_jobtypes()
MNIST = "kubeflow/pytorch-dist-mnist:latest"
CONTAINER = "spec.pytorchReplicaSpecs.{}.template.spec.containers[0]"


def mnist_gloo() -> dict[str, Any]:
    """A PyTorchJob in the shape of upstream's mnist gloo example: image and args only, Master and Worker."""

    def replica() -> dict[str, Any]:
        container = {"name": "pytorch", "image": MNIST, "args": ["--backend", "gloo"]}
        return {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pytorch-dist-mnist-gloo"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }


def mpi_pi() -> dict[str, Any]:
    """An MPIJob in the shape of mpi-operator's pi example: mpirun in the launcher, sshd in the workers."""
    image = "mpioperator/mpi-pi:openmpi"
    launcher = {"name": "mpi-launcher", "image": image, "command": ["mpirun"], "args": ["-n", "2", "/home/mpiuser/pi"]}
    worker = {"name": "mpi-worker", "image": image, "command": ["/usr/sbin/sshd"], "args": ["-De", "-f", "/c"]}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "pi"},
        "spec": {
            "slotsPerWorker": 1,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [worker]}}},
            },
        },
    }


def refusals(documents: list[dict[str, Any]], **kwargs: Any) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        validate_documents(documents, JOBTYPES, **kwargs)
    return {error.path: error.message for error in caught.value.errors}


def only_job(objects: list[Any]) -> TrainingJob:
    (job,) = [o for o in objects if isinstance(o, TrainingJob)]
    return job


# -- a container without a command -----------------------------------------------------------------------------


def test_a_replica_of_an_image_without_a_command_is_accepted_where_images_run() -> None:
    job = only_job(validate_documents([mnist_gloo()], JOBTYPES, pod_field_refusals={}))
    for role in ("master", "worker"):
        template = job.spec.replicas[role].template
        assert (template.image, template.command, template.args) == (MNIST, [], ["--backend", "gloo"])


def test_the_embedded_runtime_refuses_it_where_the_command_would_be_and_names_the_stand_in() -> None:
    found = refusals([mnist_gloo()], pod_field_refusals=EMBEDDED_REFUSALS)
    assert set(found) == {f"{CONTAINER.format(kind)}.command" for kind in ("Master", "Worker")}
    message = found[f"{CONTAINER.format('Master')}.command"]
    assert "the embedded runtime runs no images" in message
    assert f"--stand-in {MNIST}=PROGRAM" in message


def test_a_trainingjob_of_an_image_without_a_command_is_refused_at_its_own_path_on_the_embedded_runtime() -> None:
    document = {"metadata": {"name": "j"}, "spec": {"replicas": {"worker": {"template": {"image": "repo/x:1"}}}}}
    assert validate_job(document, JOBTYPES).spec.replicas["worker"].template.command == []
    found = refusals([document], pod_field_refusals=EMBEDDED_REFUSALS)
    assert list(found) == ["spec.replicas.worker.template.command"]
    assert "repo/x:1=PROGRAM" in found["spec.replicas.worker.template.command"]


def test_a_trainjob_without_a_command_is_asked_for_the_trainers_on_the_embedded_runtime() -> None:
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"args": ["--epochs", "1"]}},
    }
    job = only_job(validate_documents([trainjob], JOBTYPES, pod_field_refusals={}))
    assert job.spec.replicas["worker"].template.command == []  # the shipped runtime's image's entrypoint
    found = refusals([trainjob], pod_field_refusals=EMBEDDED_REFUSALS)
    assert list(found) == ["spec.trainer.command"]
    assert "--stand-in" in found["spec.trainer.command"]


def test_a_replica_without_a_command_or_an_image_is_refused_on_every_backend() -> None:
    document = {"metadata": {"name": "j"}, "spec": {"replicas": {"worker": {"template": {"args": ["x"]}}}}}
    found = refusals([document], pod_field_refusals={})
    assert "or an image whose entrypoint runs it" in found["spec.replicas.worker.template.command"]


# -- stand-ins -------------------------------------------------------------------------------------------------


def test_a_stand_in_runs_with_the_containers_argv_and_is_recorded() -> None:
    program = ["/opt/play/mnist.py", "--quiet"]
    job = only_job(
        validate_documents([mnist_gloo()], JOBTYPES, pod_field_refusals=EMBEDDED_REFUSALS, stand_ins={MNIST: program})
    )
    for role in ("master", "worker"):
        template = job.spec.replicas[role].template
        assert [*template.command, *template.args] == [*program, "--backend", "gloo"]
    assert job.metadata.annotations[STAND_IN_ANNOTATION] == f"{MNIST}=/opt/play/mnist.py --quiet"
    assert played(job) == {MNIST: "/opt/play/mnist.py --quiet"}


def test_one_stand_in_plays_the_launcher_and_the_workers_after_their_own_command() -> None:
    job = only_job(
        validate_documents([mpi_pi()], JOBTYPES, pod_field_refusals={}, stand_ins={"mpioperator/mpi-pi:openmpi": ["p"]})
    )
    launcher, worker = job.spec.replicas["launcher"].template, job.spec.replicas["worker"].template
    assert [*launcher.command, *launcher.args] == ["p", "mpirun", "-n", "2", "/home/mpiuser/pi"]
    assert [*worker.command, *worker.args] == ["p", "/usr/sbin/sshd", "-De", "-f", "/c"]


def test_a_stand_in_no_replica_uses_is_refused_naming_the_images() -> None:
    found = refusals([mnist_gloo()], pod_field_refusals=EMBEDDED_REFUSALS, stand_ins={"kubeflow/mnist": ["p"]})
    assert "no replica runs this image" in found["--stand-in kubeflow/mnist"]
    assert MNIST in found["--stand-in kubeflow/mnist"]
    # The replicas it was meant for are still named, so a misspelt image shows both sides.
    assert f"{CONTAINER.format('Master')}.command" in found


def test_a_backend_that_runs_images_refuses_stand_ins_and_creates_nothing() -> None:
    backend = MemoryBackend()
    backend.runs_images = True
    with pytest.raises(SpecError) as caught:
        Operations(backend).submit([mnist_gloo()], stand_ins={MNIST: ["./play.py"]})
    (error,) = caught.value.errors
    assert error.path == "--stand-in"
    assert "on Kubernetes every replica runs its image" in error.message
    assert backend.list(TrainingJob) == []


def test_the_stand_in_is_stored_with_the_job_on_the_embedded_runtime() -> None:
    backend = MemoryBackend()
    backend.pod_field_refusals = EMBEDDED_REFUSALS
    Operations(backend).submit([mnist_gloo()], stand_ins={MNIST: ["/opt/play.py"]})
    (job,) = backend.list(TrainingJob)
    assert job.spec.replicas["worker"].template.command == ["/opt/play.py"]
    assert STAND_IN_ANNOTATION in job.metadata.annotations


@pytest.mark.parametrize(
    ("text", "image", "program"),
    [
        ("kubeflow/mnist:latest=./play.py", "kubeflow/mnist:latest", ("./play.py",)),
        ("repo/img@sha256:ab=python3 'my play.py' -v", "repo/img@sha256:ab", ("python3", "my play.py", "-v")),
    ],
)
def test_a_stand_in_is_image_equals_program_split_as_a_shell_would(
    text: str, image: str, program: tuple[str, ...]
) -> None:
    stand_in = parse_stand_in(text)
    assert (stand_in.image, stand_in.program) == (image, program)


@pytest.mark.parametrize(
    ("text", "words"), [("./play.py", "IMAGE=PROGRAM"), ("img=", "name the program"), ("=p", "IMAGE")]
)
def test_a_malformed_stand_in_is_one_sentence_with_the_fix(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_stand_in(text)


def test_a_stand_in_past_the_models_bounds_is_refused_not_stored() -> None:
    document = mnist_gloo()
    with pytest.raises(SpecError) as caught:
        validate_documents([document], JOBTYPES, stand_ins={MNIST: ["p" * 129 * 1024]})
    assert any(error.path == "--stand-in" for error in caught.value.errors)
    job = only_job(validate_documents([document], JOBTYPES))
    assert apply_stand_ins(job, {})[0] == job
