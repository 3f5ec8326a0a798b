-- Resume a StreamingQuery: spec.suspend = false (the operator starts the driver again on the
-- pinned plan and checkpoint).
if type(obj.spec) ~= "table" then
  obj.spec = {}
end
obj.spec.suspend = false
return obj
