-- Argo CD health check for lorafleet.dev/AdapterAlias (Lua 5.1, as Argo CD runs it).
-- Healthy: the alias serves spec.adapter. Progressing: no status yet, a status older than the
-- spec, or the target adapter is still Pending. Degraded: the deploy was refused (the target is
-- Rejected/Failed, of another tenant, or being deleted; the previous adapter keeps serving) or
-- another alias claims the model, or the spec is invalid, or what it serves vanished or is
-- not Ready (requests for the model fail). Missing: the target LoRAAdapter does not exist and
-- nothing serves the model.
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

-- A spec with no adapter (invalid, reported by the operator as InvalidSpec) must not make
-- the script itself fail: Argo CD would then show no health at all.
local wanted = (obj.spec ~= nil and obj.spec.adapter) or "(no spec.adapter)"
local generation = obj.metadata ~= nil and obj.metadata.generation or nil
local deployed = condition("Deployed")
if obj.status == nil or deployed == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to deploy " .. wanted
  return hs
end
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. generation
  return hs
end

local conflict = condition("Conflict")
if conflict ~= nil and conflict.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(conflict, "Conflict")
  return hs
end

-- What it serves vanished or is not Ready (its pool deleted, every owner refused it):
-- requests for the model fail now, whatever the last deploy did.
local ready = condition("Ready")
local serving = obj.status.adapter
if ready ~= nil and ready.status == "False" and serving ~= nil and serving ~= "" then
  if ready.reason == "AdapterNotReady" and string.find(ready.message or "", "which is Pending", 1, true) then
    hs.status = "Progressing"
  else
    hs.status = "Degraded"
  end
  hs.message = describe(ready, "Not serving " .. serving)
  return hs
end

if deployed.status == "True" and obj.status.adapter == wanted then
  hs.status = "Healthy"
  hs.message = "Serving " .. obj.status.adapter
  return hs
end
if deployed.status == "True" then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to deploy " .. wanted
  return hs
end

if deployed.reason == "AdapterNotFound" and (serving == nil or serving == "") then
  hs.status = "Missing"
elseif deployed.reason == "AdapterNotReady" and string.find(deployed.message or "", " is Pending", 1, true) then
  -- The operator is still validating or placing the target: the deploy will complete.
  hs.status = "Progressing"
elseif deployed.reason == "AwaitingReplicas" then
  -- Ready, waiting for a replica to verify its files; the previous version serves.
  hs.status = "Progressing"
else
  hs.status = "Degraded"
end
hs.message = describe(deployed, "Deploy of " .. wanted .. " refused")
return hs
