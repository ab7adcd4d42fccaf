-- wrk script for scripts/bench-http: POST /v1/check with a key picked at
-- random among KEYS (default 10,000) per request, the same bodies that
-- crates/server/examples/load.rs sends. LIMIT (default 1000000/s) and
-- ALGORITHM (default gcra) set the limit; PREFIX (default user:) the keys'
-- names; AT_MS, when set, the decision time (for a server that trusts it).
--
-- The requests are formatted once per wrk thread in init(), so request()
-- only picks one: the Lua cost per request is a table lookup and a random
-- number, and no response() callback is defined (defining one makes wrk
-- hand every answer to Lua). wrk itself counts "Non-2xx or 3xx responses",
-- which the bench script checks.

local requests = {}
local n = 0

function init(args)
  n = tonumber(os.getenv("KEYS") or "10000")
  local limit = os.getenv("LIMIT") or "1000000/s"
  local algorithm = os.getenv("ALGORITHM") or "gcra"
  local prefix = os.getenv("PREFIX") or "user:"
  local at = os.getenv("AT_MS")
  local at_ms = at and string.format(',"at_ms":%s', at) or ""
  local headers = { ["Content-Type"] = "application/json" }
  for k = 0, n - 1 do
    local body = string.format(
      '{"key":"%s%05d","limit":{"algorithm":"%s","rate":"%s"}%s}',
      prefix, k, algorithm, limit, at_ms)
    requests[k + 1] = wrk.format("POST", "/v1/check", headers, body)
  end
  -- Each wrk thread has its own Lua state; seed each differently.
  math.randomseed(os.time() + tonumber(tostring(requests):match("0x(%x+)") or "0", 16))
end

function request()
  return requests[math.random(n)]
end
