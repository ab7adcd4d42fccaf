-- The algorithms, each built when a call first asks for it, and helpers
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
--   record(L, st, now, cost)       every algorithm but concurrency: counts
--                                  cost whatever the limit says and returns
--                                  the usage held (the core's
--                                  Algorithm::record); built only for a
--                                  `record` or `settle` call (RECORDING)
--   refund(L, st, admitted_at, now, cost)
--                                  every algorithm but concurrency: gives
--                                  back cost of a request admitted at
--                                  admitted_at; true when it went back,
--                                  false when dropped (Algorithm::refund)
--   charge(L, st, admitted_at, now, cost)
--                                  every algorithm but concurrency: counts
--                                  cost more for that request, possibly
--                                  into debt (Algorithm::charge); both
--                                  built only for a `settle` call
-- Every number is a bigint (see bigint.lua).
--
-- Redis runs the whole script from its top level on every call, so the top
-- level defines no algorithm: each algorithm file only registers a loader
-- in LOADERS, which builds the algorithm's table (its functions) the first
-- time a call asks for it, and helpers shared by several files (bucket.lua,
-- packed_rows.lua, tally.lua) are built the same way through `lazy`. A call
-- defines only what it uses; nothing outlives the call.

local LOADERS = {}
local ALG = {}

-- Whether this call records usage: the loaders define `record` only then,
-- so that a check or a probe builds no function it does not run; and
-- whether it settles a cost (`refund` and `charge`, which record).
local SETTLING = ARGV[1] == 'settle'
local RECORDING = ARGV[1] == 'record' or SETTLING

-- The algorithm called name, built on first use; nil when there is none.
local function algorithm(name)
  local A = ALG[name]
  if A == nil then
    local load = LOADERS[name]
    if load == nil then return nil end
    A = load()
    ALG[name] = A
  end
  return A
end

-- A function returning what build() returns, calling build once.
local function lazy(build)
  local built
  return function()
    if built == nil then built = build() end
    return built
  end
end

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
  -- Room for a spec's words from the start (a growing array reallocates).
  local out, n = { nil, nil, nil, nil, nil }, 0
  for w in string.gmatch(text, '%S+') do
    n = n + 1
    out[n] = w
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
