-- Argo CD actions of a sluice.dev/StreamingQuery: suspend, resume, restart (Lua 5.1 / gopher-lua).
-- suspend is offered while the query runs, resume while it is suspended; restart only while it
-- runs (a suspended query has no driver to restart).
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

return actions
