#!/bin/sh
# Start vLLM on loopback with the LoRA flags taken from the agent's settings, then the agent.
# The container lives as long as both do: if either exits, the other is stopped and the pod
# restarts (the agent's disk cache on its volume survives; vLLM's slots do not).
set -eu

: "${LORAFLEET_MODEL:?set LORAFLEET_MODEL to the base model folder (mounted; no hub downloads)}"
GPU_SLOTS="${LORAFLEET_AGENT_GPU_SLOTS:-250}"
CPU_SLOTS="${LORAFLEET_AGENT_CPU_SLOTS:-500}"
MAX_RANK="${LORAFLEET_AGENT_MAX_RANK:-16}"
export LORAFLEET_AGENT_GPU_SLOTS="$GPU_SLOTS" LORAFLEET_AGENT_CPU_SLOTS="$CPU_SLOTS" \
       LORAFLEET_AGENT_MAX_RANK="$MAX_RANK" LORAFLEET_AGENT_BASE_MODEL_DIR="${LORAFLEET_AGENT_BASE_MODEL_DIR:-$LORAFLEET_MODEL}"

# vLLM's API key: only vLLM and the agent hold it (docs/reference/agent.md, "Inside the pod"). Given (from
# the pool's Secret) or generated here; passed in the environment, never on a command line.
if [ -z "${LORAFLEET_AGENT_VLLM_API_KEY:-}" ]; then
    LORAFLEET_AGENT_VLLM_API_KEY="$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
fi
export LORAFLEET_AGENT_VLLM_API_KEY

# shellcheck disable=SC2086  # LORAFLEET_VLLM_EXTRA_ARGS is a list of flags on purpose
VLLM_API_KEY="$LORAFLEET_AGENT_VLLM_API_KEY" python3 -m vllm.entrypoints.openai.api_server \
    --model "$LORAFLEET_MODEL" \
    --host 127.0.0.1 --port 8000 \
    --enable-lora \
    --max-loras "$GPU_SLOTS" \
    --max-cpu-loras "$CPU_SLOTS" \
    --max-lora-rank "$MAX_RANK" \
    ${LORAFLEET_VLLM_EXTRA_ARGS:-} &
VLLM_PID=$!

python3 -m lorafleet_agent &
AGENT_PID=$!

trap 'kill -TERM $VLLM_PID $AGENT_PID 2>/dev/null || true' TERM INT
# Whichever exits first takes the other down with it.
while kill -0 "$VLLM_PID" 2>/dev/null && kill -0 "$AGENT_PID" 2>/dev/null; do
    sleep 2
done
kill -TERM "$VLLM_PID" "$AGENT_PID" 2>/dev/null || true
wait || true
exit 1
