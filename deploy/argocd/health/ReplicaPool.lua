-- Argo CD health check for lorafleet.dev/ReplicaPool (Lua 5.1, as Argo CD runs it).
-- Healthy: Ready and as many ready replicas as the autoscaler wants. Progressing: no status yet,
-- a status older than the spec, replicas starting or scaling, a merged pool's merge pending or
-- running (or waiting for its adapter to exist). Degraded: the spec is invalid (the operator
-- cannot build the StatefulSet from it), or a merged pool's merge failed or its adapter was
-- trained on another base model (neither fixes itself).
local hs = {}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then return nil end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then return c end
  end
  return nil
end

local function describe(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return tostring(c.reason or "") .. ": " .. c.message
  end
  return fallback
end

local generation = obj.metadata ~= nil and obj.metadata.generation or nil
local ready = condition("Ready")
if obj.status == nil or ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to create the replicas"
  return hs
end
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. generation
  return hs
end

if ready.status ~= "True" then
  local broken = { InvalidSpec = true, MergeFailed = true, BaseModelMismatch = true }
  if broken[ready.reason] then
    hs.status = "Degraded"
  else
    hs.status = "Progressing"
  end
  hs.message = describe(ready, "No ready replicas")
  return hs
end

local have = obj.status.readyReplicas or 0
local want = obj.status.desiredReplicas or have
if have < want then
  hs.status = "Progressing"
  hs.message = "Scaling: " .. have .. "/" .. want .. " replicas ready"
  return hs
end
hs.status = "Healthy"
hs.message = describe(ready, "Ready")
return hs
