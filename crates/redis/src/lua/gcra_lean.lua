-- The lean path: `check` and `probe` over gcra cells in plain Lua numbers,
-- the common case of the full script (driver.lua with gcra.lua), with the
-- same decisions and the same state, byte for byte.
--
-- KEYS[i]      the hash holding cell i's key
-- ARGV[1]      check | probe
-- ARGV[2]      the instant in ns since the epoch, or '' for Redis TIME
-- ARGV[3]      extra milliseconds of TTL beyond each state's expiry
-- ARGV[4..]    per cell, five words: field, n, p, burst (n and p divided by
--              their gcd, as in the full script's spec), cost
-- (the limit's numbers come as words of their own: a pattern to split a
-- spec cost more than the rest of a decision's parsing).
--
-- The store sends a call here only when it proved, as it planned the call
-- (cells.rs, `Cell::lean`), that every cell is a gcra limit with n < 2^20
-- and burst * p <= 2^52 (n and p divided by their gcd). Then, with the
-- instant split into seconds S and nanoseconds s, and S * n < 2^53 checked
-- below, every quantity the decision needs is an integer below 2^53, which
-- a double holds exactly:
--   now * n = H * 10^9 + L      H = S * n + carry, L < 10^9
--   tat     = TH * 10^9 + TL    (the stored state, in units of 1/n ns)
--   d       = max(tat - now * n, 0) <= 4.5 * 10^15 (else: not decided here)
--   ahead   = d + cost * p      <= d + burst * p < 2^53
-- Quotients are exact: for integers a and b below 2^53, a / b in doubles is
-- the true quotient rounded to the nearest double, which moves it by less
-- than 1 and never past an integer it would have to cross, so floor(a / b)
-- is the exact floor or one more, and ceil(a / b) the exact ceiling or one
-- less; each quotient below is corrected by that one step.
--
-- What it cannot decide in that range (a state booked far ahead by
-- reservations, a state it cannot read, an instant past the year 2242) it
-- leaves alone: it writes nothing and answers { 'fallback' }, and the store
-- runs the full script, which decides it or raises its error.
--
-- The reply is the full script's (per cell: allowed, limit, remaining,
-- retry, reset, delay, lease) but for its first word, the instant, which
-- the store does not read after a check or a probe: here it is the
-- instant's whole seconds, where the full script formats the instant in ns.
--
-- Redis runs this whole text on every call, so it is written for what a
-- call costs there (callgrind, docs/benchmarks.md): no function of its own
-- (a Lua call costs Redis about 600 instructions, so quotients and the
-- reading of decimals are written out where they are used), no table per
-- cell (one cell's decision stays in locals and is answered by one table
-- constructor; with more, the reply and the writes wait in two flat
-- tables), no string formatted but the state it writes, and numbers
-- answered as integer replies.

local E9 = 1000000000
local floor, ceil = math.floor, math.ceil
local sub, find = string.sub, string.find
local call = redis.call

-- The instant in seconds S and nanoseconds s: ARGV[2], or Redis TIME.
local S, s
local instant = ARGV[2]
if instant ~= '' then
  local len = #instant
  if len > 24 or find(instant, '^%d+$') == nil then return { 'fallback' } end
  if len <= 9 then
    S, s = 0, tonumber(instant)
  else
    S, s = tonumber(sub(instant, 1, len - 9)), tonumber(sub(instant, len - 8))
  end
else
  local t = call('TIME')
  S, s = tonumber(t[1]), tonumber(t[2]) * 1000
end

local n_cells = #KEYS
local all = true
-- A cell's decision and what its write needs: for one cell (the common
-- case) in these locals; for more, also in `out` (the reply so far) and
-- `pending` (per cell: field, n, H, L, ahead, reset).
local field, n, H, L, ahead, first_cost
local allowed, burst, remaining, retry, reset
local out, pending
if n_cells > 1 then
  out, pending = { S }, {}
end
for i = 1, n_cells do
  local base = 5 * i - 2
  field = ARGV[base + 1]
  n = tonumber(ARGV[base + 2])
  local p = tonumber(ARGV[base + 3])
  burst = tonumber(ARGV[base + 4])
  local cost = tonumber(ARGV[base + 5])
  if n == nil or p == nil or burst == nil or cost == nil or S * n >= 9007199254740992 then
    return { 'fallback' }
  end
  if i == 1 then first_cost = cost end
  local cap = burst * p
  -- now * n in two limbs.
  local low = s * n
  local carry = floor(low / E9)
  if carry * E9 > low then carry = carry - 1 end
  H, L = S * n + carry, low - carry * E9
  local d = 0
  local stored = call('HGET', KEYS[i], field)
  if stored then
    -- The stored decimal, of at most 24 digits, as TH * 10^9 + TL.
    local len = #stored
    if len == 0 or len > 24 or find(stored, '^%d+$') == nil then return { 'fallback' } end
    local TH, TL = 0, nil
    if len <= 9 then
      TL = tonumber(stored)
    else
      TH, TL = tonumber(sub(stored, 1, len - 9)), tonumber(sub(stored, len - 8))
    end
    local dh = TH - H
    if dh > 4500000 then return { 'fallback' } end
    if dh >= -1 then
      d = dh * E9 + (TL - L)
      if d < 0 then d = 0 end
    end
  end
  ahead = d + cost * p
  allowed, remaining, retry = 1, 0, 0
  local owed = ahead
  if ahead > cap then
    allowed = 0
    if cap > d then
      remaining = floor((cap - d) / p)
      if remaining * p > cap - d then remaining = remaining - 1 end
    end
    retry = ceil((ahead - cap) / n)
    if retry * n < ahead - cap then retry = retry + 1 end
    owed = d
  else
    remaining = floor((cap - ahead) / p)
    if remaining * p > cap - ahead then remaining = remaining - 1 end
  end
  reset = ceil(owed / n)
  if reset * n < owed then reset = reset + 1 end
  if cost == 0 then
    allowed = 1
    retry = 0
  end
  all = all and allowed == 1
  if out then
    -- The reply's seven words of the cell (the last two, a delay and a
    -- lease, are the full script's and never set here), and its write.
    local k = 7 * i - 5
    out[k], out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5], out[k + 6] =
      allowed, burst, remaining, retry, reset, 0, ''
    local j = 6 * i - 5
    pending[j], pending[j + 1], pending[j + 2], pending[j + 3], pending[j + 4], pending[j + 5] =
      field, n, H, L, ahead, reset
  end
end

-- Counted when every cell admits and the first cell's cost is not zero, as
-- in driver.lua's `check`.
if ARGV[1] == 'check' and all and n_cells > 0 and first_cost ~= 0 then
  local grace = tonumber(ARGV[3]) or 0
  local ttls
  for i = 1, n_cells do
    local until_ns = reset
    if pending then
      local j = 6 * i - 5
      field, n, H, L, ahead, until_ns =
        pending[j], pending[j + 1], pending[j + 2], pending[j + 3], pending[j + 4], pending[j + 5]
    end
    local key = KEYS[i]
    -- tat = now * n + ahead, in two limbs again.
    local low = L + ahead
    local carry = floor(low / E9)
    if carry * E9 > low then carry = carry - 1 end
    local high = H + carry
    low = low - carry * E9
    if high > 0 then
      call('HSET', key, field, string.format('%d%09d', high, low))
    else
      call('HSET', key, field, string.format('%d', low))
    end
    -- The state expires ceil(ahead / n) ns from now (the cell's reset: it
    -- admitted, so that is what reset holds), and its key keeps it by the
    -- TTL rule of driver.lua's `write` and `apply_ttls`: once per key, the
    -- longest its states need, after every write.
    local ttl = ceil(until_ns / 1000000)
    if ttl * 1000000 < until_ns then ttl = ttl + 1 end
    ttl = ttl + grace
    if ttl < 1 then ttl = 1 end
    if n_cells == 1 then
      if call('PTTL', key) < ttl then
        call('PEXPIRE', key, ttl + grace)
      end
    else
      ttls = ttls or {}
      if ttls[key] == nil or ttls[key] < ttl then ttls[key] = ttl end
    end
  end
  if ttls then
    for key, ttl in pairs(ttls) do
      if call('PTTL', key) < ttl then
        call('PEXPIRE', key, ttl + grace)
      end
    end
  end
end
if out then return out end
return { S, allowed, burst, remaining, retry, reset, 0, '' }
