-- The algorithm table every algorithm file adds itself to, and helpers
-- shared by them.
--
-- Each algorithm is a port of its Rust twin in tollgate-core (same state,
-- same integer arithmetic, same decisions) with the interface of the core's
-- `Algorithm` trait, state passed explicitly:
--   parse(fields)                  the limit's parameters from its spec
--   decode(L, text or nil)         stored state, or a new one for nil
--   encode(L, st)                  the text to store
--   evaluate(L, st, now, cost)     a decision, counting nothing
--   commit(L, st, now, cost)       counts an admitted cost; a lease or nil
--   next_available(L, st, now, cost)
--   slot(L, st, now, cost)         {at=, wait=} or nil (no reservations)
--   book(L, st, now, slot, cost)
--   expires_at(L, st)              when the state is as good as new
--   release(L, st, lease)          optional (concurrency): true when held
--   record(L, st, now, cost)       optional (stepped_window): the count
-- Every number is a bigint (see bigint.lua).

local ALG = {}

-- A decision with the core's default fields.
local function decision(allowed, limit)
  return {
    allowed = allowed,
    limit = limit,
    remaining = B.ZERO,
    retry_after = B.ZERO,
    reset_after = B.ZERO,
    delay = B.ZERO,
    lease = nil,
  }
end

-- Nanoseconds from now until instant, zero when it has passed.
local function until_ns(now, instant)
  return B.sub(instant, now)
end

-- Splits a space-separated text into its words.
local function words(text)
  local out = {}
  for w in string.gmatch(text, '%S+') do
    out[#out + 1] = w
  end
  return out
end

-- A bigint from a decimal word, or a script error naming what was wrong.
local function number_field(word, what)
  local n = B.parse(word)
  if n == nil then
    error('tollgate: bad ' .. what .. ': ' .. tostring(word))
  end
  return n
end
