-- Argo CD health check for lorafleet.dev/AdapterAlias (Lua 5.1, as Argo CD runs it).
-- Healthy: the alias serves spec.adapter. Progressing: no status yet, a status older than the
-- spec, or the target adapter is still Pending. Degraded: the deploy was refused (the target is
-- Rejected/Failed, of another tenant, or being deleted; the previous adapter keeps serving) or
-- another alias claims the model. Missing: the target LoRAAdapter does not exist and nothing
-- serves the model.
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
    return c.reason .. ": " .. c.message
  end
  return fallback
end

local generation = obj.metadata ~= nil and obj.metadata.generation or nil
local deployed = condition("Deployed")
if obj.status == nil or deployed == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to deploy " .. obj.spec.adapter
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

if deployed.status == "True" and obj.status.adapter == obj.spec.adapter then
  hs.status = "Healthy"
  hs.message = "Serving " .. obj.status.adapter
  return hs
end
if deployed.status == "True" then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to deploy " .. obj.spec.adapter
  return hs
end

local serving = obj.status.adapter
if deployed.reason == "AdapterNotFound" and (serving == nil or serving == "") then
  hs.status = "Missing"
elseif deployed.reason == "AdapterNotReady" and string.find(deployed.message or "", " is Pending", 1, true) then
  -- The operator is still validating or placing the target: the deploy will complete.
  hs.status = "Progressing"
else
  hs.status = "Degraded"
end
hs.message = describe(deployed, "Deploy of " .. obj.spec.adapter .. " refused")
return hs
