-- Argo CD health of a sluice.dev/QueryCluster (Lua 5.1 / gopher-lua).
--
-- The operator validates the cluster's spec and checks that its Kafka answers; its status has
-- observedGeneration, phase (Ready or Degraded), conditions Ready / Degraded and the resolved
-- runtime image. Runs in Argo CD's restricted VM (base library, `table`, a safe `os`).
--
-- Precedence, first match wins:
--   1. no status yet, or status.observedGeneration < metadata.generation -> Progressing
--   2. Degraded condition True, or phase Degraded                        -> Degraded
--   3. Ready condition True (or phase Ready without conditions)          -> Healthy
--   4. otherwise                                                         -> Progressing

local hs = {}

local function text(value)
  if value == nil or type(value) == "table" then
    return ""
  end
  return tostring(value)
end

local function present(value)
  return value ~= nil and type(value) ~= "table" and tostring(value) ~= ""
end

local function field(tbl, key)
  if type(tbl) ~= "table" then
    return nil
  end
  return tbl[key]
end

local function condition(status, wanted)
  local conditions = field(status, "conditions")
  if type(conditions) ~= "table" then
    return nil
  end
  for _, c in ipairs(conditions) do
    if type(c) == "table" and c.type == wanted then
      return c
    end
  end
  return nil
end

local function done(status, message)
  hs.status = status
  hs.message = message
  return hs
end

local function evaluate()
  local generation = tonumber(field(field(obj, "metadata"), "generation"))
  local status = field(obj, "status")
  if type(status) ~= "table" or (status.observedGeneration == nil and status.phase == nil) then
    return done("Progressing", "Waiting for the operator to check the cluster")
  end
  local observed = tonumber(status.observedGeneration)
  if generation ~= nil and (observed == nil or observed < generation) then
    return done("Progressing", "Waiting for the operator to observe generation " .. text(generation)
      .. " (status is of generation " .. (observed ~= nil and text(observed) or "none") .. ")")
  end

  local degraded = condition(status, "Degraded")
  if field(degraded, "status") == "True" then
    local message = degraded.message
    if not present(message) then
      message = "the operator reports the cluster Degraded"
    end
    if present(degraded.reason) then
      message = text(degraded.reason) .. ": " .. text(message)
    end
    return done("Degraded", message)
  end
  if status.phase == "Degraded" then
    return done("Degraded", "The operator reports phase Degraded")
  end

  local ready = condition(status, "Ready")
  if field(ready, "status") == "True" or (ready == nil and status.phase == "Ready") then
    local message = field(ready, "message")
    if not present(message) then
      message = "Ready"
    end
    if present(status.image) then
      message = text(message) .. "; runtime image " .. text(status.image)
    end
    return done("Healthy", message)
  end

  local why = field(ready, "message")
  if present(why) then
    return done("Progressing", "Not ready yet: " .. text(why))
  end
  return done("Progressing", "Waiting for the operator to check the cluster")
end

return evaluate()
