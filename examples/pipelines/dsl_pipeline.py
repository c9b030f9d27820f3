"""The v1-components pipeline written with Phalanx's Python DSL (phalanx.dsl) instead of YAML.

    python examples/pipelines/dsl_pipeline.py                          # print the Pipeline document
    python examples/pipelines/dsl_pipeline.py --submit                 # submit it and the run dsl-demo-run
    python examples/pipelines/dsl_pipeline.py --submit --run again     # another run (from the cache, if unchanged)

Component files are named relative to this file (``HERE``), read when a step is defined and put in the document
inline, so it runs from any directory.
"""

import sys
from pathlib import Path

from phalanx import dsl

HERE = Path(__file__).parent


def build() -> dsl.Pipeline:
    p = dsl.Pipeline("dsl-demo")
    count = p.param("count", "Integer", default=10)
    factors = p.param("factors", "JsonArray", default=[1, 2, 3])
    numbers = p.component("numbers", HERE / "components" / "make_numbers.yaml", arguments={"count": count})
    p.component(
        "sums",
        HERE / "components" / "scaled_sum.yaml",
        arguments={"numbers": numbers.outputs["numbers"], "factor": dsl.ITEM},
        parallel_for=factors,
        retries=1,
    )
    p.command(
        "shout",
        ["sh", "-c", 'tr 0-9 a-j < "$0"', dsl.input_path("numbers")],
        inputs={"numbers": "Dataset"},
        arguments={"numbers": numbers.outputs["numbers"]},
        when=count >= 10,
    )
    return p


if __name__ == "__main__":
    pipeline = build()
    args = sys.argv[1:]
    if "--submit" in args:
        from phalanx import Client, OperationError

        run_name = args[args.index("--run") + 1] if "--run" in args[:-1] else None
        with Client() as client:
            try:
                submitted_all = pipeline.submit(client, run_name=run_name, arguments={"count": 20})
            except OperationError as err:  # a run of that name exists: a run's name is taken once
                sys.exit(f"error: {err}; to run it again pass --run NAME (unchanged, it completes from the cache)")
            for submitted in submitted_all:
                print(f"{submitted.kind.lower()}/{submitted.name} {submitted.verb}")
    else:
        print(pipeline.to_yaml(), end="")
