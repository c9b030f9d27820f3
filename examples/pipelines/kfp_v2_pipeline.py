"""A Kubeflow Pipelines v2 pipeline, compiled by the kfp SDK to kfp_v2_pipeline.yaml; Phalanx runs that IR file as is.

Regenerate the IR (kfp is in Phalanx's test extras: `pip install -e '.[test]'`, or `pip install kfp`):

    python examples/pipelines/kfp_v2_pipeline.py

Run it (the IR becomes the Pipeline `kfp-v2-demo`; kfp_v2_run.yaml runs it):

    phalanx submit examples/pipelines/kfp_v2_pipeline.yaml
    phalanx submit examples/pipelines/kfp_v2_run.yaml

A container component and two lightweight Python components: those run `python3 -m kfp.dsl.executor_main`, so the
Python the step runs with needs the kfp package (`install_kfp_package=False`: nothing is installed at run time).
"""

from pathlib import Path

from kfp import compiler, dsl
from kfp.dsl import Dataset, Input, Output

IMAGE = "python:3.11"


@dsl.container_component
def make_numbers(count: int, numbers: Output[Dataset]):
    return dsl.ContainerSpec(
        image=IMAGE,
        command=["sh", "-c", 'mkdir -p "$(dirname "$1")" && seq "$0" > "$1"', count, numbers.path],
    )


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def scaled_sum(numbers: Input[Dataset], factor: int) -> int:
    with open(numbers.path) as source:
        return factor * sum(int(line) for line in source if line.strip())


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def report(totals: list, threshold: int) -> str:
    verdict = "big" if max(totals) > threshold else "small"
    print(f"totals {totals}: {verdict}")
    return verdict


@dsl.pipeline(name="kfp-v2-demo", description="Numbers made once, summed per factor in parallel, then reported.")
def pipeline(count: int = 10, threshold: int = 100):
    numbers = make_numbers(count=count)
    with dsl.ParallelFor([1, 2, 3]) as factor:
        sums = scaled_sum(numbers=numbers.outputs["numbers"], factor=factor).set_retry(num_retries=1)
    verdict = report(totals=dsl.Collected(sums.output), threshold=threshold)
    with dsl.If(verdict.output == "big"):
        report(totals=[1], threshold=0).set_caching_options(False)


if __name__ == "__main__":
    target = Path(__file__).with_suffix(".yaml")
    compiler.Compiler().compile(pipeline, str(target))
    regenerate = "# Compiled by the kfp SDK; regenerate with: python examples/pipelines/kfp_v2_pipeline.py\n"
    target.write_text(regenerate + target.read_text())
