-- The entry point: one atomic operation over every cell (limit on a key) of
-- a request, mirroring tollgate-memory's multi.rs: every limit is evaluated
-- before anything is counted, and a rejection counts nothing anywhere.
--
-- KEYS[i]      the hash holding cell i's key (one field per limit)
-- ARGV[1]      operation: check | probe (check, counting nothing) | reserve
--              | next | record | release | settle | time
-- ARGV[2]      the instant in ns since the epoch, or '' for Redis TIME
-- ARGV[3]      extra milliseconds of TTL beyond each state's expiry
-- ARGV[4]      reserve: max wait in ns ('' for none); release: the lease;
--              settle: "admitted_at estimate actual" (ns, costs)
-- ARGV[5..]    per cell, three words: field, limit spec, cost
-- The reply starts with the instant used, as a decimal string.
--
-- A limit with a ban (ban.lua) is decided as tollgate-core's `Banned`
-- decides it: refused while banned, the limit deciding otherwise, each of
-- its refusals in a counting check a strike; reservations land after the
-- ban.

local op = ARGV[1]

local function current_time()
  if ARGV[2] ~= '' then
    return number_field(ARGV[2], 'instant')
  end
  -- seconds * 10^9 + microseconds * 1000, in limbs of 10^7 ns: the low limb
  -- is the sub-10 ms part, the rest (below 2^53) are whole limbs.
  local t = redis.call('TIME')
  local seconds, micros = tonumber(t[1]), tonumber(t[2])
  local sub = micros % 10000
  return B.shifted(B.num(seconds * 100 + (micros - sub) / 10000), sub * 1000)
end

local now = current_time()
local grace_ms = tonumber(ARGV[3]) or 0

-- The cells: algorithm, limit, key, field, cost and decoded state.
local cells = {}
for i = 1, #KEYS do
  local base = 4 + 3 * (i - 1)
  local field, spec, cost = ARGV[base + 1], ARGV[base + 2], ARGV[base + 3]
  local ban, ban_state = nil, nil
  if string.sub(spec, 1, 4) == 'ban ' then
    ban, spec = BAN().split(spec)
    local stored = redis.call('HGET', KEYS[i], 'ban ' .. field)
    if stored == false then stored = nil end
    ban_state = BAN().decode(stored)
  end
  local f = words(spec)
  local A = algorithm(f[1])
  if A == nil then
    error('tollgate: unknown algorithm ' .. tostring(f[1]))
  end
  local L = A.parse(f)
  local stored = redis.call('HGET', KEYS[i], field)
  if stored == false then
    stored = nil
  else
    -- Format version 1 (docs/redis-state.md): every value starts with a
    -- digit; a later version starts with its tag, which this script must
    -- not misread.
    local first = string.byte(stored, 1)
    if first == nil or first < 48 or first > 57 then
      error('tollgate: state of ' .. field .. ' is not format version 1')
    end
  end
  cells[i] = {
    A = A,
    L = L,
    key = KEYS[i],
    field = field,
    cost = number_field(cost, 'cost'),
    st = A.decode(L, stored),
    ban = ban,
    ban_state = ban_state,
  }
end

-- Whether cell c is banned at t.
local function banned(c, t)
  return c.ban ~= nil and BAN().is_banned(c.ban_state, t)
end

-- The earliest instant at or after t that cell c's ban lets a request in.
local function open_from(c, t)
  if c.ban == nil then return t end
  return B.max(t, c.ban_state.ends)
end

-- The limit's decision for cost at now, or the ban's while banned.
local function evaluate(c, cost)
  if banned(c, now) then
    return BAN().refusal(c.ban_state, now, c.A.evaluate(c.L, c.st, now, B.ZERO), 'b')
  end
  return c.A.evaluate(c.L, c.st, now, cost)
end

-- Where a reservation of cell c made at t would be booked: the limit's
-- slot from when the ban lets it in, waiting for the ban too.
local function slot_at(c, t)
  local open = open_from(c, t)
  local slot = c.A.slot(c.L, c.st, open, c.cost)
  if slot == nil then return nil end
  return { at = slot.at, wait = B.add(slot.wait, B.sub(open, t)) }
end

-- The TTL each key written in this call needs (ms): the longest of its
-- states' times plus the grace, applied once per key when the operation
-- is done (`apply_ttls`), so that a key's TTL does not depend on the order
-- of its fields nor on Redis's clock ticking between their writes.
local ttls = {}

-- Writes a cell's state back, with a TTL that outlives its expiry by the
-- grace: a key that lives less than that is given the grace once more on
-- top, so that most writes leave the TTL as it is. A
-- `timeless` operation (release: the call carries no instant, and like the
-- memory store's it drops nothing by the clock) deletes only a state that
-- is as good as new at any time; Redis's clock may be far past the instants
-- the calls around it sent.
local function write(key, field, expires, encode, timeless)
  if B.cmp(expires, timeless and B.ZERO or now) <= 0 then
    redis.call('HDEL', key, field)
    return
  end
  redis.call('HSET', key, field, encode())
  local ttl = B.approx(B.div_ceil(B.sub(expires, now), B.MILLION)) + grace_ms
  if ttl < 1 then ttl = 1 end
  if ttls[key] == nil or ttls[key] < ttl then
    ttls[key] = ttl
  end
end

-- Gives each key written the TTL its states need (see `ttls`): one that
-- lives less than that is pushed out to it plus the grace.
local function apply_ttls()
  for key, ttl in pairs(ttls) do
    if redis.call('PTTL', key) < ttl then
      redis.call('PEXPIRE', key, ttl + grace_ms)
    end
  end
end

local function store(c, timeless)
  write(c.key, c.field, c.A.expires_at(c.L, c.st), function()
    return c.A.encode(c.L, c.st)
  end, timeless)
end

-- Writes a cell's ban state back (its own field, the same TTL rule).
local function store_ban(c)
  write(c.key, 'ban ' .. c.field, BAN().expires_at(c.ban, c.ban_state), function()
    return BAN().encode(c.ban_state)
  end, false)
end

local function peek(c)
  local d = evaluate(c, B.ZERO)
  d.allowed = true
  d.retry_after = B.ZERO
  d.delay = B.ZERO
  return d
end

local function push_decision(out, d)
  out[#out + 1] = d.allowed and '1' or '0'
  out[#out + 1] = B.str(d.limit)
  out[#out + 1] = B.str(d.remaining)
  out[#out + 1] = B.str(d.retry_after)
  out[#out + 1] = B.str(d.reset_after)
  out[#out + 1] = B.str(d.delay)
  -- A ban's decision has no lease; its place carries the ban's mark.
  out[#out + 1] = d.lease or d.ban or ''
end

-- Decides every cell; counts only when `count` and every cell admits.
local function check(count)
  local decisions, all = {}, true
  for i, c in ipairs(cells) do
    local d = evaluate(c, c.cost)
    if B.is_zero(c.cost) then
      d.allowed = true
      d.retry_after = B.ZERO
      d.delay = B.ZERO
    end
    decisions[i] = d
    all = all and d.allowed
  end
  local counted = count and #cells > 0 and not B.is_zero(cells[1].cost)
  if counted and all then
    for i, c in ipairs(cells) do
      decisions[i].lease = c.A.commit(c.L, c.st, now, c.cost)
      store(c)
    end
  elseif counted then
    -- Each limit that refused takes a strike (its ban's, if any).
    for i, c in ipairs(cells) do
      if c.ban ~= nil and not decisions[i].allowed and not banned(c, now) then
        if BAN().strike(c.ban, c.ban_state, now) then
          decisions[i] = BAN().refusal(c.ban_state, now, decisions[i], 's')
        end
        store_ban(c)
      end
    end
  end
  local out = { B.str(now) }
  for _, d in ipairs(decisions) do
    push_decision(out, d)
  end
  return out
end

-- Where a reservation of cell c made at t would land: when its cost is
-- admitted, or later when the algorithm queues it.
local function landing(c, t)
  local admitted = c.A.next_available(c.L, c.st, open_from(c, t), c.cost)
  local slot = slot_at(c, t)
  if slot == nil then return admitted end
  return B.max(admitted, slot.at)
end

local MAX_ROUNDS = 64

local function reserve()
  for _, c in ipairs(cells) do
    if c.A.slot(c.L, c.st, now, c.cost) == nil then
      error('tollgate: reservation_unsupported')
    end
  end
  local wait, refused = B.ZERO, nil
  if #cells > 0 and not B.is_zero(cells[1].cost) then
    local at, converged = now, false
    for _ = 1, MAX_ROUNDS do
      local next_at = at
      for _, c in ipairs(cells) do
        next_at = B.max(next_at, landing(c, at))
      end
      if B.cmp(next_at, at) == 0 then
        converged = true
        break
      end
      at = next_at
    end
    local slots, shaping = {}, B.ZERO
    for i, c in ipairs(cells) do
      slots[i] = slot_at(c, at)
      shaping = B.max(shaping, slots[i].wait)
    end
    wait = B.sat64(B.add(B.sub(at, now), shaping))
    local limit = B.U64_MAX
    if ARGV[4] ~= '' then limit = number_field(ARGV[4], 'max wait') end
    if not converged or B.cmp(wait, limit) > 0 then
      refused = B.max(B.sub(wait, limit), B.ONE)
    else
      for i, c in ipairs(cells) do
        -- Converged: at is past every ban, where slot_at is the limit's.
        c.A.book(c.L, c.st, at, slots[i], c.cost)
        store(c)
      end
    end
  end
  local out = { B.str(now), refused == nil and '1' or '0', B.str(wait), B.str(refused or B.ZERO) }
  for _, c in ipairs(cells) do
    local d = peek(c)
    if refused ~= nil then
      d.allowed = false
      d.retry_after = refused
    end
    push_decision(out, d)
  end
  return out
end

local function next_available()
  local c = cells[1]
  local instant = now
  if not B.is_zero(c.cost) then
    instant = c.A.next_available(c.L, c.st, open_from(c, now), c.cost)
  end
  return { B.str(now), B.str(instant) }
end

local function record()
  local c = cells[1]
  if c.A.record == nil then
    error('tollgate: record_unsupported')
  end
  local count = c.A.record(c.L, c.st, now, c.cost)
  -- Cost 0 records nothing, so it writes nothing back: not even the
  -- deletion of a state that has expired at `now`, which an out-of-order
  -- record at an earlier instant still counts (the memory store keeps it).
  if not B.is_zero(c.cost) then store(c) end
  return { B.str(now), B.str(count) }
end

local function release()
  local c = cells[1]
  local held = false
  if c.A.release ~= nil then
    held = c.A.release(c.L, c.st, ARGV[4])
  end
  if held then store(c, true) end
  return { B.str(now), held and '1' or '0' }
end

-- Settles a request admitted at admitted_at with cost estimate whose actual
-- cost is actual, as tollgate-core's Algorithm::settle does, on the one
-- cell (a ban stands: only the limit's state changes). The instant is never
-- before the admission. Answers the outcome: 0 exact (nothing changed), 1
-- charged, 2 refunded, 3 refund dropped (what the request was counted in
-- no longer counts). Only a charge or a refund given back writes, and it
-- deletes nothing: like the memory store, which keeps a key's state
-- however it was settled, it writes the state even when it is as good as
-- new at `now` (a refund may leave it so), since an out-of-order record
-- at an earlier instant still counts it; its TTL is at least the grace.
local function settle()
  local c = cells[1]
  local w = words(ARGV[4])
  if #w ~= 3 then
    error('tollgate: bad settle words (admitted_at estimate actual)')
  end
  local function u64(word, what)
    local n = number_field(word, what)
    if B.cmp(n, B.U64_MAX) > 0 then error('tollgate: bad ' .. what .. ': ' .. word) end
    return n
  end
  local admitted = u64(w[1], 'admission instant')
  local estimate = u64(w[2], 'estimate')
  local actual = u64(w[3], 'actual cost')
  if c.A.refund == nil then
    error('tollgate: settle_unsupported')
  end
  now = B.max(now, admitted)
  local function keep()
    write(c.key, c.field, B.max(c.A.expires_at(c.L, c.st), B.ONE), function()
      return c.A.encode(c.L, c.st)
    end, true)
  end
  local order, outcome = B.cmp(actual, estimate), '0'
  if order > 0 then
    c.A.charge(c.L, c.st, admitted, now, B.sub(actual, estimate))
    keep()
    outcome = '1'
  elseif order < 0 then
    if c.A.refund(c.L, c.st, admitted, now, B.sub(estimate, actual)) then
      keep()
      outcome = '2'
    else
      outcome = '3'
    end
  end
  return { B.str(now), outcome }
end

local reply
if op == 'check' then
  reply = check(true)
elseif op == 'probe' then
  reply = check(false)
elseif op == 'reserve' then
  reply = reserve()
elseif op == 'next' then
  reply = next_available()
elseif op == 'record' then
  reply = record()
elseif op == 'release' then
  reply = release()
elseif op == 'settle' then
  reply = settle()
elseif op == 'time' then
  reply = { B.str(now) }
else
  error('tollgate: unknown operation ' .. tostring(op))
end
apply_ttls()
return reply
