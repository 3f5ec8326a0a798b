-- Restart a StreamingQuery's driver: a new spec.restartNonce (same plan, same checkpoint).
-- The nonce is the current UTC time (20 characters, within the field's 63); a restart within the
-- same second as the previous one gets a counter appended so that the value still changes.
local os = require("os")
if type(obj.spec) ~= "table" then
  obj.spec = {}
end
local previous = obj.spec.restartNonce
local now = os.date("!%Y-%m-%dT%H:%M:%SZ")
local nonce = now
local n = 1
while nonce == previous do
  n = n + 1
  nonce = now .. "-" .. tostring(n)
end
obj.spec.restartNonce = nonce
return obj
