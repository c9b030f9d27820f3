# syntax=docker/dockerfile:1
# The Phalanx image: one image for phalanx-operator, phalanx-scheduler and phalanx-node-agent (the manifests pick
# the component by its command) and the phalanx CLI. Build and push it: docs/install.md#the-image.
#
# Two stages: `build` turns the source into wheels (Phalanx's and its dependencies', with the kubernetes extra,
# the sweeps extra the operator's sweep controller asks Optuna with, postgres for a study or a job history on
# PostgreSQL, history for the operator's job history, and server for `phalanx server` over the cluster);
# the runtime stage installs those wheels only, so it has no compiler, no source tree and no build tools, and
# pip's index is not consulted there. Installed from the wheel (not the source tree), like any user's install.
# tests/integration/test_dockerfile.py runs these COPY and RUN steps in a clean virtual environment, since CI
# has no container engine.

ARG PYTHON_VERSION=3.12

FROM python:${PYTHON_VERSION}-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY src/ src/
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels ".[kubernetes,sweeps,postgres,history,server]"

FROM python:${PYTHON_VERSION}-slim
# The uid and gid the manifests run the components as (runAsUser, runAsGroup: 65532).
RUN groupadd --gid 65532 phalanx \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin phalanx
# The wheels are mounted from the build stage for this one step, so they never become a layer of the image.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m pip install --no-cache-dir --no-index --find-links /wheels "phalanx[kubernetes,sweeps,postgres,history,server]"
ENV PYTHONUNBUFFERED=1
USER 65532:65532
# The manifests set the command (phalanx-operator, phalanx-scheduler, phalanx-node-agent, or phalanx server);
# alone, the CLI.
CMD ["phalanx", "--help"]
