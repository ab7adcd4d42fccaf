-- The lean path: `check` and `probe` over gcra cells in plain Lua numbers,
-- the common case of the full script (driver.lua with gcra.lua), with the
-- same reply and the same state, byte for byte.
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
-- A divided quotient is corrected to the exact floor (`div_floor`), since a
-- double division may round up to the next integer.
--
-- What it cannot decide in that range (a state booked far ahead by
-- reservations, a state it cannot read, an instant past the year 2242) it
-- leaves alone: it writes nothing and answers { 'fallback' }, and the store
-- runs the full script, which decides it or raises its error.
--
-- Redis runs this from its top level on every call: it defines three small
-- functions, builds one small array per cell, and answers its numbers below
-- 2^53 as integer replies, which Redis converts more cheaply than text
-- (the store reads both alike).

local E9 = 1000000000
local floor = math.floor
local format = string.format
local call = redis.call

local FALLBACK = { 'fallback' }

local function div_floor(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function div_ceil(a, b)
  local q = div_floor(a, b)
  if q * b < a then q = q + 1 end
  return q
end

-- A decimal of up to 24 digits as (high, low) with value high * 10^9 + low;
-- nil for anything else.
local function split(text)
  local len = #text
  if len == 0 or len > 24 or string.find(text, '^%d+$') == nil then
    return nil
  end
  if len <= 9 then return 0, tonumber(text) end
  return tonumber(string.sub(text, 1, len - 9)), tonumber(string.sub(text, len - 8))
end

-- The instant: ARGV[2], or Redis TIME.
local S, s
local instant = ARGV[2]
if instant ~= '' then
  S, s = split(instant)
  if S == nil then return FALLBACK end
else
  local t = call('TIME')
  instant = nil
  S, s = tonumber(t[1]), tonumber(t[2]) * 1000
end

local count = ARGV[1] == 'check'
local grace = tonumber(ARGV[3]) or 0
local n_cells = #KEYS
local cells = {}
local all = true
for i = 1, n_cells do
  local base = 3 + 5 * (i - 1)
  local field = ARGV[base + 1]
  local n, p = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  local burst = tonumber(ARGV[base + 4])
  local cost = tonumber(ARGV[base + 5])
  if n == nil or p == nil or burst == nil or cost == nil or S * n >= 9007199254740992 then
    return FALLBACK
  end
  local cap = burst * p
  -- now * n in two limbs.
  local low = s * n
  local carry = div_floor(low, E9)
  local H, L = S * n + carry, low - carry * E9
  local d = 0
  local stored = call('HGET', KEYS[i], field)
  if stored then
    local TH, TL = split(stored)
    if TH == nil then return FALLBACK end
    local dh = TH - H
    if dh > 4500000 then return FALLBACK end
    if dh >= -1 then
      d = dh * E9 + (TL - L)
      if d < 0 then d = 0 end
    end
  end
  local ahead = d + cost * p
  local allowed, remaining, retry, reset = true, 0, 0, 0
  if ahead <= cap then
    remaining = div_floor(cap - ahead, p)
    reset = div_ceil(ahead, n)
  else
    allowed = false
    if cap > d then remaining = div_floor(cap - d, p) end
    retry = div_ceil(ahead - cap, n)
    reset = div_ceil(d, n)
  end
  if cost == 0 then
    allowed = true
    retry = 0
  end
  all = all and allowed
  -- In the reply's order, then what a write needs.
  cells[i] = { allowed and 1 or 0, burst, remaining, retry, reset, field, n, H, L, ahead }
end

-- Counted when every cell admits and the first cell's cost is not zero, as
-- in driver.lua's `check`.
if count and all and n_cells > 0 and tonumber(ARGV[8]) ~= 0 then
  for i = 1, n_cells do
    local c = cells[i]
    local key, n, ahead = KEYS[i], c[7], c[10]
    -- tat = now * n + ahead, in two limbs again.
    local low = c[9] + ahead
    local carry = div_floor(low, E9)
    local high = c[8] + carry
    low = low - carry * E9
    local text
    if high > 0 then
      text = format('%d%09d', high, low)
    else
      text = format('%d', low)
    end
    call('HSET', key, c[6], text)
    -- The state expires ceil(ahead / n) ns from now: the TTL rule of
    -- driver.lua's `store`.
    local ttl = div_ceil(div_ceil(ahead, n), 1000000) + grace
    if ttl < 1 then ttl = 1 end
    if call('PTTL', key) < ttl then
      call('PEXPIRE', key, ttl + grace)
    end
  end
end

-- Numbers below 2^53 go back as integer replies (cheaper than text).
local now_text = instant or (S > 0 and format('%d%09d', S, s) or format('%d', s))
if n_cells == 1 then
  local c = cells[1]
  return { now_text, c[1], c[2], c[3], c[4], c[5], 0, '' }
end
local out = { now_text }
local k = 1
for i = 1, n_cells do
  local c = cells[i]
  out[k + 1] = c[1]
  out[k + 2] = c[2]
  out[k + 3] = c[3]
  out[k + 4] = c[4]
  out[k + 5] = c[5]
  out[k + 6] = 0
  out[k + 7] = ''
  k = k + 7
end
return out
