-- Argo CD actions of a sluice.dev/StreamingQuery: suspend, resume, restart, rollback (Lua 5.1 /
-- gopher-lua). suspend is offered while the query runs, resume while it is suspended; restart only
-- while it runs (a suspended query has no driver to restart); rollback while there is a previous
-- plan to return to (a rollout in flight or waiting that started from one, or an upgrade in
-- status.history) and no earlier rollback request waits for the operator.
local actions = {}

local suspended = false
if obj ~= nil and type(obj.spec) == "table" and obj.spec.suspend == true then
  suspended = true
end

actions["suspend"] = {["disabled"] = suspended, ["iconClass"] = "fa fa-fw fa-pause",
                      ["displayName"] = "Suspend query"}
actions["resume"] = {["disabled"] = not suspended, ["iconClass"] = "fa fa-fw fa-play",
                     ["displayName"] = "Resume query"}
actions["restart"] = {["disabled"] = suspended, ["iconClass"] = "fa fa-fw fa-redo",
                      ["displayName"] = "Restart driver"}

-- the rollout steps whose edit a rollback undoes (sluice.core.rollback.UNDONE_STEPS)
local undone = {Backfilling = true, Applying = true, Verifying = true, RollingBack = true, Failed = true,
                AwaitingUpgrade = true, Rejected = true}
local previous = false
local status = nil
if obj ~= nil and type(obj.status) == "table" then
  status = obj.status
end
if status ~= nil then
  local rollout = status.rollout
  if type(rollout) == "table" and undone[rollout.step] == true and type(rollout.fromHash) == "string" then
    previous = true
  end
  local history = status.history
  if type(history) == "table" and type(history[1]) == "table" and type(history[1].fromHash) == "string" then
    previous = true
  end
end
local waiting = false
if obj ~= nil and type(obj.metadata) == "table" and type(obj.metadata.annotations) == "table" then
  local request = obj.metadata.annotations["sluice.dev/rollback-request"]
  if request ~= nil and request ~= obj.metadata.annotations["sluice.dev/rollback-done"] then
    waiting = true
  end
end
actions["rollback"] = {["disabled"] = (not previous) or waiting, ["iconClass"] = "fa fa-fw fa-undo",
                       ["displayName"] = "Roll back to the previous plan"}

return actions
