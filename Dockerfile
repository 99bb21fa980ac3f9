# Control-plane image: the operator, the gateway and the CLI, as the Helm chart runs them
# (`python3 -m lorafleet_operator`, `python3 -m lorafleet_gateway`, user 10001). Replica pods use
# replica-image/Dockerfile (vLLM + agent) instead.
#   docker build -t registry.example.com/lorafleet:0.1.0 .
# The base is pinned by version; pin it by digest as well in CI
# (`docker buildx imagetools inspect python:3.11.11-slim-bookworm`).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# --- build: a virtual environment holding lorafleet and only the control plane's dependencies
FROM ${PYTHON_IMAGE} AS build
RUN python3 -m venv /opt/lorafleet
WORKDIR /src
COPY pyproject.toml README.md ./
COPY core core
COPY operator operator
COPY gateway gateway
COPY replica-image/lorafleet_agent replica-image/lorafleet_agent
COPY cli cli
COPY standalone standalone
COPY sim sim
COPY loadtest loadtest
COPY demo demo
# A plain (non-editable) install; the extras pull only what the control plane needs (no torch,
# no vLLM, no plotting libraries: the simulator and the load tester are not run there).
RUN /opt/lorafleet/bin/pip install --no-cache-dir '.[operator,gateway,cli,canary]'

# --- runtime: the same base, the environment, a non-root user; no compiler, no sources
FROM ${PYTHON_IMAGE}
COPY --from=build /opt/lorafleet /opt/lorafleet
ENV PATH=/opt/lorafleet/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --gid 10001 lorafleet \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/lorafleet lorafleet
WORKDIR /home/lorafleet
USER 10001:10001
# The chart sets the command per Deployment; this default answers `lorafleet --help`.
ENTRYPOINT []
CMD ["lorafleet", "--help"]
