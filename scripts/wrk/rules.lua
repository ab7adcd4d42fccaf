-- wrk script for scripts/bench-overrides: rules-based POST /v1/check,
-- domain DOMAIN (default api), one descriptor KEY (default api_key) =
-- PREFIX (default visitor-) and a 7-digit number picked at random among
-- TENANTS (default 65,536) per request.
--
-- As scripts/wrk/check.lua: the requests are formatted once per wrk thread
-- in init(), request() only picks one, and no response() callback is
-- defined; wrk counts "Non-2xx or 3xx responses", which the bench script
-- checks.

local requests = {}
local n = 0

function init(args)
  n = tonumber(os.getenv("TENANTS") or "65536")
  local domain = os.getenv("DOMAIN") or "api"
  local key = os.getenv("KEY") or "api_key"
  local prefix = os.getenv("PREFIX") or "visitor-"
  local headers = { ["Content-Type"] = "application/json" }
  for k = 0, n - 1 do
    local body = string.format(
      '{"domain":"%s","descriptors":[{"entries":[{"key":"%s","value":"%s%07d"}]}]}',
      domain, key, prefix, k)
    requests[k + 1] = wrk.format("POST", "/v1/check", headers, body)
  end
  -- Each wrk thread has its own Lua state; seed each differently.
  math.randomseed(os.time() + tonumber(tostring(requests):match("0x(%x+)") or "0", 16))
end

function request()
  return requests[math.random(n)]
end
