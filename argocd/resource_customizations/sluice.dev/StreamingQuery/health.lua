-- Argo CD health of a sluice.dev/StreamingQuery (Lua 5.1 / gopher-lua).
--
-- Runs in Argo CD's restricted VM: only the base library, `table` and a safe `os` are there
-- (no `string`, no `math`), so this script uses none of them. Every access is nil-safe.
--
-- Precedence, first match wins:
--   1. no status yet, or status.observedGeneration < metadata.generation      -> Progressing
--   2. phase Deleting                                                         -> Progressing
--   3. a compile error, an upgrade that failed / was rolled back / rejected /
--      waits (lastUpgrade of the current generation, or the rollout step),
--      or the Degraded condition True                                         -> Degraded
--   4. spec.suspend true and phase Suspended                                  -> Suspended
--   5. a rollout in flight (status.rollout with a non-terminal step)          -> Progressing
--   6. Progressing condition True                                             -> Progressing
--   7. Ready condition True                                                   -> Healthy
--   8. otherwise (not ready yet, nothing wrong)                               -> Progressing

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

-- "a; b; c" of the non-empty values
local function join(values, separator)
  local out = {}
  for _, value in ipairs(values) do
    if present(value) then
      table.insert(out, tostring(value))
    end
  end
  return table.concat(out, separator or "; ")
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

local function is_true(c)
  return type(c) == "table" and c.status == "True"
end

local function error_text(err)
  if type(err) ~= "table" then
    return ""
  end
  if present(err["class"]) and present(err.message) then
    return tostring(err["class"]) .. ": " .. tostring(err.message)
  end
  return join({err["class"], err.message}, "")
end

local function first_reason(record)
  local reasons = field(record, "reasons")
  if type(reasons) == "table" then
    return reasons[1]
  end
  return nil
end

local function done(status, message)
  hs.status = status
  hs.message = message
  return hs
end

-- the rollout steps the operator is carrying out (sluice.core.rollout.IN_FLIGHT)
local IN_FLIGHT = {Deploying = true, Backfilling = true, Applying = true, Verifying = true,
                   RollingBack = true}

-- rollout.strategy -> how a message names it {at the start of a sentence, within one}
local KINDS = {
  create = {"First deployment", "first deployment"},
  replace = {"Replace", "replace"},
  ["in-place"] = {"In-place upgrade", "in-place upgrade"},
}

local function evaluate()
  local meta = field(obj, "metadata")
  local spec = field(obj, "spec")
  local status = field(obj, "status")
  local generation = tonumber(field(meta, "generation"))

  -- 1. not observed yet
  if type(status) ~= "table" or (status.observedGeneration == nil and status.phase == nil) then
    return done("Progressing", "Waiting for the operator to reconcile the query")
  end
  local observed = tonumber(status.observedGeneration)
  if generation ~= nil and (observed == nil or observed < generation) then
    return done("Progressing", "Waiting for the operator to observe generation " .. text(generation)
      .. " (status is of generation " .. (observed ~= nil and text(observed) or "none") .. ")")
  end
  local phase = status.phase
  local rollout = status.rollout
  if type(rollout) ~= "table" then
    rollout = nil
  end
  local step = field(rollout, "step")
  local last = status.lastUpgrade
  if type(last) ~= "table" then
    last = nil
  end
  local outcome = field(last, "outcome")
  local last_is_current = generation ~= nil and tonumber(field(last, "generation")) == generation
  local degraded = condition(status, "Degraded")
  local progressing = condition(status, "Progressing")
  local ready = condition(status, "Ready")

  -- 2. deleting (Argo CD itself shows an object with a deletionTimestamp as Progressing, too)
  if phase == "Deleting" then
    local why = field(progressing, "message")
    return done("Progressing", "Deleting: " .. (present(why) and text(why) or "draining and cleaning up"))
  end

  -- 3. Degraded
  local compile_error = status.lastCompileError
  if type(compile_error) == "table" then
    return done("Degraded", "The SQL does not compile, the running plan is unchanged: "
      .. text(compile_error.message))
  end
  if step == "Failed" or (last_is_current and outcome == "Failed") then
    local err = error_text(field(last, "error"))
    if err == "" then
      err = error_text(field(rollout, "error"))
    end
    local why = field(last, "message")
    if not present(why) then
      why = field(rollout, "message")
    end
    if field(rollout, "rollback") ~= nil or err == "" then
      -- the rollback failed too (its message says so), or no error was reported
      return done("Degraded", "Upgrade Failed, nothing more happens until the spec is edited: " .. text(why))
    end
    return done("Degraded", "Upgrade Failed, the query stays on the new plan until the spec is edited: "
      .. err)
  end
  if last_is_current and outcome == "RolledBack" then
    local why = error_text(last.error)
    if why == "" then
      why = text(field(degraded, "message"))
    end
    local mode = present(last.rollback) and (" (" .. text(last.rollback) .. ")") or ""
    return done("Degraded", "Upgrade RolledBack" .. mode
      .. ", the previous plan runs again until the spec is edited: " .. why)
  end
  if step == "Rejected" or (last_is_current and outcome == "Rejected") then
    local category = field(last, "category")
    if not present(category) then
      category = field(rollout, "category")
    end
    local why = first_reason(last)
    if not present(why) then
      why = field(rollout, "message")
    end
    return done("Degraded", "Upgrade Rejected (" .. text(category)
      .. " change), the previous plan keeps running: " .. text(why))
  end
  if step == "AwaitingUpgrade" or (last_is_current and outcome == "Pending") then
    local source = rollout or last
    local why = field(rollout, "message")
    if not present(why) then
      why = first_reason(last)
    end
    return done("Degraded", "Upgrade Pending (" .. text(field(source, "category")) .. " change, "
      .. text(field(source, "decision")) .. "), the previous plan keeps running: " .. text(why))
  end
  if is_true(degraded) then
    local message = field(degraded, "message")
    if not present(message) then
      message = "the operator reports the query Degraded"
    end
    return done("Degraded", join({degraded.reason, message}, ": "))
  end
  if phase == "Degraded" then
    return done("Degraded", "The operator reports phase Degraded")
  end

  -- 4. Suspended (the operator observed spec.suspend)
  if field(spec, "suspend") == true and phase == "Suspended" then
    return done("Suspended", "Suspended (spec.suspend: true): the driver is stopped, its state is kept")
  end

  -- 5. a rollout in flight
  if rollout ~= nil and (step == nil or IN_FLIGHT[step]) then
    local kind = KINDS[rollout.strategy] or KINDS["in-place"]
    local detail = ""
    if rollout.strategy == "replace" and present(rollout.replaceStrategy) then
      detail = " with " .. text(rollout.replaceStrategy)
    end
    if rollout.strategy ~= "create" and present(rollout.category) then
      detail = detail .. " (" .. text(rollout.category) .. " change)"
    end
    local what = kind[1] .. detail
    if step == "RollingBack" then
      what = "Rolling back the " .. kind[2] .. detail
    end
    local message = what .. ", step " .. (present(step) and text(step) or "unknown")
    if present(rollout.message) then
      message = message .. ": " .. text(rollout.message)
    end
    return done("Progressing", message)
  end

  -- 6. the operator says it is still working
  if is_true(progressing) then
    local why = field(progressing, "message")
    return done("Progressing", present(why) and text(why) or "The operator is reconciling the query")
  end

  -- 7. Healthy
  if is_true(ready) or (ready == nil and status.ready == true and phase == "Running") then
    local message = "Running generation " .. (observed ~= nil and text(observed) or "?")
    local version = field(status.plan, "version")
    if present(version) then
      message = message .. " on plan version " .. text(version)
    end
    local active = field(status.drivers, "active")
    if present(active) then
      message = message .. ", active driver " .. text(active)
    end
    return done("Healthy", message)
  end

  -- 8. not ready, nothing wrong (yet)
  local why = field(ready, "message")
  if present(why) then
    return done("Progressing", "Not ready yet: " .. text(why))
  end
  return done("Progressing", "Waiting for the driver to become ready")
end

return evaluate()
