-- Argo CD health check for lorafleet.dev/LoRAAdapter (Lua 5.1, as Argo CD runs it).
-- Healthy: phase Ready. Degraded: Rejected (no pool of the fleet serves the spec; publish a new
-- version, or add the pool it needs), Failed (every owner refused it) or Pending because its pool
-- lists no adapterSources (NoAdapterSources). Progressing: no status yet, a status older than
-- the spec, or Pending (validating, or waiting for ready replicas).
local hs = {}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then return nil end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then return c end
  end
  return nil
end

local function message(kind, fallback)
  local c = condition(kind)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return tostring(c.reason or "") .. ": " .. c.message
  end
  return fallback
end

local generation = obj.metadata ~= nil and obj.metadata.generation or nil
if obj.status == nil or obj.status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to validate the adapter"
  return hs
end
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. generation
  return hs
end

local phase = obj.status.phase
if phase == "Ready" then
  hs.status = "Healthy"
  hs.message = message("Placed", "Ready")
elseif phase == "Rejected" then
  hs.status = "Degraded"
  hs.message = message("Validated", message("Ready", "Rejected"))
elseif phase == "Failed" then
  hs.status = "Degraded"
  hs.message = message("Ready", "Failed")
elseif condition("Validated") ~= nil and condition("Validated").reason == "NoAdapterSources" then
  -- Pending, but nothing changes until someone edits the pool: a sync must not wait on it.
  hs.status = "Degraded"
  hs.message = message("Validated", "NoAdapterSources")
else
  hs.status = "Progressing"
  hs.message = message("Ready", "Pending")
end
return hs
