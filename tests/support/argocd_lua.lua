-- Test harness: run one Argo CD Lua script (health.lua, discovery.lua or action.lua) the way
-- Argo CD's Lua VM does, and print what it returns as JSON on stdout.
--
--   lua5.1 argocd_lua.lua SCRIPT OBJECT [FROZEN_EPOCH]
--
-- OBJECT is a Lua file `return { ... }` holding the Kubernetes object (written by
-- tests/integration/test_argocd_lua.py); it becomes the global `obj` of the script.
--
-- Like Argo CD's VM (util/lua/lua.go, oslib_safe.go), the script sees only the base library, the
-- `table` library and a safe `os` with `time` and `date` (also through `require("os")`); there is
-- no `string` or `math` library, and string methods ("x"):sub() are switched off while it runs.
-- With FROZEN_EPOCH (seconds since 1970, UTC), `os.date` and `os.time` without a time argument
-- answer for that instant instead of now: only this harness freezes the clock, the scripts call
-- `os.date` as they do in Argo CD.
--
-- Exit status: 0 and the JSON on stdout; 2 and the message on stderr when the script fails or
-- returns something that is not a table.

local script_path, object_path, frozen = arg[1], arg[2], tonumber(arg[3])
if script_path == nil or object_path == nil then
  io.stderr:write("usage: lua5.1 argocd_lua.lua SCRIPT OBJECT [FROZEN_EPOCH]\n")
  os.exit(64)
end

local function fail(message)
  io.stderr:write(tostring(message) .. "\n")
  os.exit(2)
end

-- the object -----------------------------------------------------------------------------------
local load_object, load_error = loadfile(object_path)
if load_object == nil then
  fail("cannot load the object: " .. tostring(load_error))
end
local object = load_object()

-- the sandbox ----------------------------------------------------------------------------------
local real_date, real_time = os.date, os.time

local safe_os = {
  date = function(format, time)
    if time == nil and frozen ~= nil then
      time = frozen
    end
    return real_date(format or "%c", time)
  end,
  time = function(spec)
    if spec == nil and frozen ~= nil then
      return frozen
    end
    return real_time(spec)
  end,
}

local safe_table = {}
for name, fn in pairs(table) do
  safe_table[name] = fn
end

local env = {
  assert = assert, error = error, ipairs = ipairs, next = next, pairs = pairs, pcall = pcall,
  print = print, rawequal = rawequal, rawget = rawget, rawset = rawset, select = select,
  setmetatable = setmetatable, getmetatable = getmetatable, tonumber = tonumber,
  tostring = tostring, type = type, unpack = unpack, xpcall = xpcall, _VERSION = _VERSION,
  table = safe_table, os = safe_os,
}
env._G = env
env.require = function(name)
  if name == "os" then
    return safe_os
  end
  error("module '" .. tostring(name) .. "' is not available in Argo CD's Lua VM", 2)
end
env.obj = object

local chunk, compile_error = loadfile(script_path)
if chunk == nil then
  fail("cannot compile " .. script_path .. ": " .. tostring(compile_error))
end
setfenv(chunk, env)

local string_meta = getmetatable("")
local string_index = string_meta.__index
string_meta.__index = {}
local ok, result = pcall(chunk)
string_meta.__index = string_index
if not ok then
  fail("lua error in " .. script_path .. ": " .. tostring(result))
end
if type(result) ~= "table" then
  fail("expect table output from Lua script, not " .. type(result))
end

-- JSON -----------------------------------------------------------------------------------------
local encode

local ESCAPES = {['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n",
                 ["\r"] = "\\r", ["\t"] = "\\t"}

local function encode_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return ESCAPES[c] or string.format("\\u%04x", c:byte())
  end) .. '"'
end

local function encode_number(n)
  if n ~= n or n == math.huge or n == -math.huge then
    error("cannot encode the number " .. tostring(n) .. " as JSON")
  end
  if n == math.floor(n) and math.abs(n) < 2 ^ 53 then
    return string.format("%.0f", n)
  end
  local short = string.format("%.14g", n)
  if tonumber(short) == n then
    return short
  end
  return string.format("%.17g", n)
end

-- like gopher-json: an empty table is an empty array; 1..n keys an array; string keys an object
local function encode_table(t, seen)
  if seen[t] then
    error("cannot encode a table that contains itself")
  end
  seen[t] = true
  local count, strings = 0, 0
  for key in pairs(t) do
    count = count + 1
    if type(key) == "string" then
      strings = strings + 1
    end
  end
  local out = {}
  if count == 0 then
    seen[t] = nil
    return "[]"
  end
  if strings == 0 then
    for i = 1, count do
      if t[i] == nil then
        error("cannot encode a table with keys other than 1.." .. count .. " as a JSON array")
      end
      out[i] = encode(t[i], seen)
    end
    seen[t] = nil
    return "[" .. table.concat(out, ",") .. "]"
  end
  if strings ~= count then
    error("cannot encode a table with both string and other keys as JSON")
  end
  local keys = {}
  for key in pairs(t) do
    keys[#keys + 1] = key
  end
  table.sort(keys)
  for i, key in ipairs(keys) do
    out[i] = encode_string(key) .. ":" .. encode(t[key], seen)
  end
  seen[t] = nil
  return "{" .. table.concat(out, ",") .. "}"
end

encode = function(value, seen)
  local kind = type(value)
  if kind == "table" then
    return encode_table(value, seen)
  elseif kind == "string" then
    return encode_string(value)
  elseif kind == "number" then
    return encode_number(value)
  elseif kind == "boolean" then
    return tostring(value)
  elseif kind == "nil" then
    return "null"
  end
  error("cannot encode a " .. kind .. " as JSON")
end

local encoded_ok, encoded = pcall(encode, result, {})
if not encoded_ok then
  fail("the script's result: " .. tostring(encoded))
end
io.write(encoded, "\n")
