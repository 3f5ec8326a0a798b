-- Suspend a StreamingQuery: spec.suspend = true (the operator drains and stops the driver, state
-- and offsets are kept).
if type(obj.spec) ~= "table" then
  obj.spec = {}
end
obj.spec.suspend = true
return obj
