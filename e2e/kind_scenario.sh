#!/usr/bin/env bash
# lorafleet operator on a real cluster (kind): CRDs, operator, a ReplicaPool, adapters, aliases.
#
# Needs: docker, kind, kubectl, and this repo's .venv (the operator runs on the host against
# the kind cluster through your kubeconfig, so no operator image is needed). Replica pods need
# the replica image (vLLM + agent); without it the pods never become Ready, and the scenario
# checks what the operator does regardless (objects, conditions, refusal of deletion), then
# the pre-warm part only when REPLICA_IMAGE is given and loaded into kind.
#
#   e2e/kind_scenario.sh                      # control-plane checks
#   REPLICA_IMAGE=lorafleet/replica:dev e2e/kind_scenario.sh   # + pods, annotations, scaling
#   KEEP=1 e2e/kind_scenario.sh               # keep the cluster afterwards
set -euo pipefail

CLUSTER=${CLUSTER:-lorafleet-e2e}
NS=${NS:-lorafleet-e2e}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
HASH=sha256:$(printf 'b%.0s' $(seq 64))
OP_PID=""

step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
cleanup() {
  [[ -n "$OP_PID" ]] && kill "$OP_PID" 2>/dev/null || true
  [[ "${KEEP:-0}" == 1 ]] || kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# wait_jsonpath KIND NAME JSONPATH EXPECTED [TIMEOUT]
wait_jsonpath() {
  local deadline=$((SECONDS + ${5:-60})) got=""
  while ((SECONDS < deadline)); do
    got=$(kubectl -n "$NS" get "$1" "$2" -o "jsonpath=$3" 2>/dev/null || true)
    [[ "$got" == "$4" ]] && return 0
    sleep 1
  done
  fail "$1/$2 $3: want '$4', got '$got'"
}

step "kind cluster $CLUSTER"
kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 120s
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
if [[ -n "${REPLICA_IMAGE:-}" ]]; then kind load docker-image "$REPLICA_IMAGE" --name "$CLUSTER"; fi
# The pool's inside secrets (the chart creates them for its pool; this scenario has no chart).
kubectl -n "$NS" create secret generic gpu-internal \
  --from-literal=vllm-api-key="$(openssl rand -hex 24)" \
  --from-literal=agent-token="$(openssl rand -hex 24)" \
  --from-literal=data-token="$(openssl rand -hex 24)" --dry-run=client -o yaml | kubectl apply -f -

step "CRDs"
kubectl apply -f "$ROOT/crds/"
kubectl wait --for=condition=Established crd --all --timeout=60s

step "operator (host process, kubeconfig login)"
LORAFLEET_OPERATOR_NAMESPACES=$NS LORAFLEET_OPERATOR_POD_PATCH_INTERVAL_SECONDS=2 \
  "$PY" -m lorafleet_operator >"${TMPDIR:-/tmp}/lorafleet-operator-e2e.log" 2>&1 &
OP_PID=$!
sleep 5
kill -0 "$OP_PID" || fail "operator exited; see ${TMPDIR:-/tmp}/lorafleet-operator-e2e.log"

step "ReplicaPool -> StatefulSet, Service, PDB"
kubectl -n "$NS" apply -f - <<YAML
apiVersion: lorafleet.dev/v1alpha1
kind: ReplicaPool
metadata: {name: gpu}
spec:
  baseModel: {name: tiny-llama, hash: "$HASH", uri: /models/tiny}
  adapterSources: [s3://adapters/]
  # kind has no GPU: gpus 0 and small requests, so the pods schedule on a laptop.
  engine:
    image: "${REPLICA_IMAGE:-ghcr.io/lorafleet/replica:0.1.0}"
    gpuSlots: 8
    hostRamSlots: 32
    maxRank: 16
    gpus: 0
    startupSeconds: 600
    drainSeconds: 20
    resources: {requests: {cpu: 500m, memory: 2Gi}, limits: {memory: 4Gi}}
  replicas: {min: 2, max: 4}
  autoscaling: {pollIntervalSeconds: 2, scaleUpStabilizationSeconds: 0, scaleDownStabilizationSeconds: 30}
  template:
    metadata: {labels: {e2e: kind}}
    tolerations: [{key: lorafleet.dev/e2e, operator: Exists, effect: NoSchedule}]
    env: [{name: LORAFLEET_AGENT_S3_ENDPOINT_URL, value: "http://minio.invalid:9000"}]
YAML
wait_jsonpath statefulset gpu '{.spec.replicas}' 2
wait_jsonpath statefulset gpu '{.metadata.ownerReferences[0].kind}' ReplicaPool
kubectl -n "$NS" get statefulset gpu -o jsonpath='{.spec.template.spec.containers[0].args}' \
  | grep -q -- '--max-lora-rank' || fail "engine flags missing"
sts_path() { kubectl -n "$NS" get statefulset gpu -o "jsonpath=$1"; }
[[ "$(sts_path '{.spec.template.spec.tolerations[0].key}')" == lorafleet.dev/e2e ]] \
  || fail "spec.template.tolerations not rendered"
[[ "$(sts_path '{.spec.template.metadata.labels.e2e}')" == kind ]] || fail "template labels missing"
[[ "$(sts_path '{.spec.template.spec.securityContext.runAsNonRoot}')" == true ]] \
  || fail "replica pods not non-root"
sts_path '{.spec.template.spec.containers[0].startupProbe.exec.command}' \
  | grep -q lorafleet_agent.probe || fail "vLLM startupProbe missing"
sts_path '{.spec.template.spec.containers[0].command[0]}' | grep -qx python3 \
  || fail "containers must run the image's python3"
if kubectl -n "$NS" apply --dry-run=server --validate=strict -f - >/dev/null 2>&1 <<YAML
apiVersion: lorafleet.dev/v1alpha1
kind: ReplicaPool
metadata: {name: typo}
spec:
  baseModel: {name: tiny-llama, hash: "$HASH", uri: /models/tiny}
  template: {tolerations: [{key: nvidia.com/gpu, operator: Exists, efect: NoSchedule}]}
YAML
then fail "a misspelt toleration field was accepted"
else echo "ok: the CRD's core/v1 schema refuses tolerations[0].efect"; fi
kubectl -n "$NS" get service gpu >/dev/null
kubectl -n "$NS" get poddisruptionbudget gpu >/dev/null
wait_jsonpath replicapool gpu '{.status.selector}' 'lorafleet.dev/component=replica,lorafleet.dev/pool=gpu'

step "adapters: valid and rejected"
for i in 1 2; do
  kubectl -n "$NS" apply -f - <<YAML
apiVersion: lorafleet.dev/v1alpha1
kind: LoRAAdapter
metadata: {name: acme-support-v$i}
spec:
  tenant: acme
  version: v$i
  baseModelHash: "$HASH"
  rank: 8
  alpha: 16
  targetModules: [q_proj, v_proj]
  weightsUri: s3://adapters/acme/support/v$i/
  checksum: sha256:$(printf '%064x' "$i")
YAML
done
kubectl -n "$NS" apply -f - <<YAML
apiVersion: lorafleet.dev/v1alpha1
kind: LoRAAdapter
metadata: {name: acme-too-big}
spec: {tenant: acme, version: v1, baseModelHash: "$HASH", rank: 64, alpha: 16,
       targetModules: [q_proj], weightsUri: "s3://a/b/", checksum: "sha256:$(printf '%064x' 9)"}
YAML
wait_jsonpath lora acme-too-big '{.status.phase}' Rejected
wait_jsonpath lora acme-too-big '{.status.conditions[?(@.type=="Validated")].reason}' RankTooHigh
wait_jsonpath lora acme-support-v1 '{.status.conditions[?(@.type=="Validated")].reason}' Valid
if ! kubectl apply --dry-run=server -f - >/dev/null 2>&1 <<YAML
apiVersion: lorafleet.dev/v1alpha1
kind: LoRAAdapter
metadata: {name: acme-support-v1, namespace: $NS}
spec: {tenant: acme, version: v1, baseModelHash: "$HASH", rank: 4, alpha: 16,
       targetModules: [q_proj], weightsUri: "s3://x/y/", checksum: "sha256:$(printf '%064x' 1)"}
YAML
then echo "ok: the API server refuses a spec change (CEL self == oldSelf)"; else fail "spec change accepted"; fi

step "merged pool: merge Job, status.merge, garbage collection"
kubectl -n "$NS" create secret generic acme-merged-internal \
  --from-literal=vllm-api-key="$(openssl rand -hex 24)" \
  --from-literal=agent-token="$(openssl rand -hex 24)" \
  --from-literal=data-token="$(openssl rand -hex 24)" --dry-run=client -o yaml | kubectl apply -f -
kubectl -n "$NS" apply -f - <<YAML
apiVersion: lorafleet.dev/v1alpha1
kind: ReplicaPool
metadata: {name: acme-merged}
spec:
  baseModel: {name: tiny-llama, hash: "$HASH", uri: /models/tiny}
  engine: {image: "${REPLICA_IMAGE:-ghcr.io/lorafleet/replica:0.1.0}", gpus: 0,
           resources: {requests: {cpu: 500m, memory: 2Gi}, limits: {memory: 4Gi}}}
  replicas: {min: 1, max: 1}
  merged: {adapter: acme-support-v1}
YAML
# The operator runs the merge as a Job owned by the pool (`planning/merge_job.py`); the pool is
# not Ready until the merge is (its weights are not in any store here, so with an image the Job
# fails and the pool says MergeFailed; without one it stays Merging).
owned_job() {
  kubectl -n "$NS" get jobs -o \
    'jsonpath={range .items[?(@.metadata.ownerReferences[0].name=="acme-merged")]}{.metadata.name}{end}'
}
JOB=""
for _ in $(seq 60); do JOB=$(owned_job); [[ -n "$JOB" ]] && break; sleep 1; done
[[ "$JOB" == acme-merged-merge-* ]] || fail "no merge Job owned by the merged pool (got '$JOB')"
wait_jsonpath job "$JOB" '{.metadata.ownerReferences[0].kind}' ReplicaPool
wait_jsonpath replicapool acme-merged '{.status.conditions[?(@.type=="Ready")].status}' False
reason=$(kubectl -n "$NS" get replicapool acme-merged \
  -o 'jsonpath={.status.conditions[?(@.type=="Ready")].reason}')
[[ "$reason" =~ ^(MergePending|Merging|MergeFailed)$ ]] || fail "merged pool Ready reason: $reason"
kubectl -n "$NS" get replicapool acme-merged -o wide   # the Merge and Merged Adapter columns
kubectl -n "$NS" delete replicapool acme-merged --wait=true
for _ in $(seq 60); do kubectl -n "$NS" get job "$JOB" >/dev/null 2>&1 || break; sleep 1; done
kubectl -n "$NS" get job "$JOB" >/dev/null 2>&1 && fail "merge Job not garbage collected"
echo "ok: the merge Job went with its pool (ownerReference garbage collection)"

if [[ -z "${REPLICA_IMAGE:-}" ]]; then
  wait_jsonpath lora acme-support-v1 '{.status.conditions[?(@.type=="Placed")].reason}' NoReadyReplicas
  echo "no REPLICA_IMAGE: replicas never become Ready; skipping pre-warm, alias and scaling checks"
  exit 0
fi

step "replicas Ready -> owners, pre-warm annotations"
kubectl -n "$NS" rollout status statefulset/gpu --timeout=600s
wait_jsonpath lora acme-support-v1 '{.status.phase}' Ready 120
for pod in $(kubectl -n "$NS" get lora acme-support-v1 -o jsonpath='{.status.owners[*]}'); do
  kubectl -n "$NS" get pod "$pod" -o jsonpath='{.metadata.annotations.lorafleet\.dev/owned-adapters}' \
    | grep -q acme-support-v1 || fail "$pod does not pre-warm acme-support-v1"
done

step "alias deploy, rollback, refused deletion"
kubectl -n "$NS" apply -f - <<YAML
apiVersion: lorafleet.dev/v1alpha1
kind: AdapterAlias
metadata: {name: acme-support-prod}
spec: {model: "acme/support:prod", tenant: acme, adapter: acme-support-v1}
YAML
wait_jsonpath alias acme-support-prod '{.status.adapter}' acme-support-v1
kubectl -n "$NS" patch alias acme-support-prod --type merge -p '{"spec":{"adapter":"acme-support-v2"}}'
wait_jsonpath alias acme-support-prod '{.status.previousAdapter}' acme-support-v1
kubectl -n "$NS" patch alias acme-support-prod --type merge -p '{"spec":{"adapter":"acme-support-v1"}}'
wait_jsonpath alias acme-support-prod '{.status.adapter}' acme-support-v1
kubectl -n "$NS" delete lora acme-support-v1 --wait=false
wait_jsonpath lora acme-support-v1 '{.status.conditions[?(@.type=="DeletionBlocked")].reason}' ReferencedByAlias
kubectl -n "$NS" patch alias acme-support-prod --type merge -p '{"spec":{"adapter":"acme-support-v2"}}'
kubectl -n "$NS" wait --for=delete lora/acme-support-v1 --timeout=60s

step "scale subresource and autoscaler events"
kubectl -n "$NS" get events --field-selector involvedObject.name=gpu
echo "ALL CHECKS PASSED"
