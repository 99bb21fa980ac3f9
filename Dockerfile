# Control-plane image: the operator, the gateway and the CLI, as the Helm chart runs them
# (`python -m lorafleet_operator`, `python -m lorafleet_gateway`). Replica pods use
# replica-image/Dockerfile (vLLM + agent) instead.
#   docker build -t REGISTRY/lorafleet:0.1.0 .
FROM python:3.11-slim

WORKDIR /src
COPY pyproject.toml README.md ./
COPY core core
COPY operator operator
COPY gateway gateway
COPY replica-image/lorafleet_agent replica-image/lorafleet_agent
COPY cli cli
# A plain (non-editable) install: the wheel holds every lorafleet package; the extras pull
# only what the control plane needs (no torch, no vLLM).
RUN pip install --no-cache-dir '.[operator,gateway,cli]' \
    && rm -rf /src \
    && useradd --uid 10001 --create-home lorafleet

WORKDIR /home/lorafleet
USER 10001
# The chart sets the command per Deployment; this default answers `lorafleet --help`.
ENTRYPOINT []
CMD ["lorafleet", "--help"]
