-- Roll a StreamingQuery back to its previous plan: a new sluice.dev/rollback-request annotation.
-- An action can only edit the object it runs on, and the query of the previous plan is kept in
-- that plan's ConfigMap; so the action asks, and the operator answers the request once: it
-- patches the query fields of the spec (sources, sql, sink, trigger, shufflePartitions) back to
-- that plan's (the plan a rollout in flight or waiting started from, else the plan before the
-- newest upgrade in status.history), writes sluice.dev/rollback-done (the request it answered) and
-- sluice.dev/rollback-result (what it did, or why it could not), and posts an event. The edit is
-- then carried out like any other (in place or a replace, gated, rolled back on failure).
-- The request is the current UTC time; a second request within the same second gets a counter.
local os = require("os")
if type(obj.metadata) ~= "table" then
  obj.metadata = {}
end
if type(obj.metadata.annotations) ~= "table" then
  obj.metadata.annotations = {}
end
local key = "sluice.dev/rollback-request"
local previous = obj.metadata.annotations[key]
local now = os.date("!%Y-%m-%dT%H:%M:%SZ")
local request = now
local n = 1
while request == previous do
  n = n + 1
  request = now .. "-" .. tostring(n)
end
obj.metadata.annotations[key] = request
return obj
