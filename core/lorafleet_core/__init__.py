"""The shared core of lorafleet: every product (operator, gateway, agent, CLI, standalone,
simulator, load tester) imports it; it imports none of them.

Split by what it is, and importing any part has no side effects:

- `api`: the custom resources (pydantic models, the one source of truth), the generated CRDs
  and their offline validation, names of kinds, labels and annotations, condition reasons,
  API-key records, the LoRAAdapter builder.
- `planning`: pure decisions with explicit inputs and clocks: adapter validation and owners,
  alias deploys, pre-warm, pools, scaling, placement, the cache policy, the token estimate.
  It performs no I/O and imports only `api`, `wire`'s data models and itself
  (tests/api/test_core_layers.py fails otherwise).
- `wire`: what travels between processes: the agent's `/state` and its one client, the
  registry record, tiers, OpenAI error bodies and stream framing, strict JSON.
- `kube`: talking to Kubernetes (client configuration, TokenReview).
- `web`: HTTP plumbing of the servers (the edge protocol, request ids, client disconnects,
  credentials read from mounted files).
- `storage`: local files and the object store: adapter folders and checksums, manifests
  folders and what standalone mode keeps beside them, merged weights, uploads.
"""
