-- The counting decision shared by the window algorithms: a port of
-- tollgate-core's algorithm/tally.rs. Used by sliding_window_log below and
-- by sliding_window_counter.lua, which follows it in the script.

-- The decision for cost at now, given what the limit holds (count). The
-- instants are functions, called only when the decision reports them:
-- reset_if_counted (the state untouched again if this cost were counted),
-- reset (as it stands) and retry (when the same cost would be admitted).
local function tally_decide(limit, count, now, cost, reset_if_counted, reset, retry)
  local after = B.add(count, cost)
  local d
  if B.cmp(after, limit) <= 0 then
    d = decision(true, limit)
    d.remaining = B.sub(limit, after)
    local at
    if B.is_zero(cost) then at = reset() else at = reset_if_counted() end
    d.reset_after = until_ns(now, at)
  else
    d = decision(false, limit)
    d.remaining = B.sub(limit, count)
    d.retry_after = until_ns(now, retry())
    d.reset_after = until_ns(now, reset())
  end
  return d
end

-- Rejected while requests booked ahead are queued: come back when a new
-- reservation would get its slot.
local function queued_decision(limit, now, next_at, reset_at)
  local d = decision(false, limit)
  d.retry_after = until_ns(now, next_at)
  d.reset_after = until_ns(now, reset_at)
  return d
end

-- sliding_window_log: at most n in any span (t - p, t]; a port of
-- tollgate-core's algorithm/sliding_log.rs over the running totals of
-- algorithm/running_totals.rs (whose marks sit in a small_deque.rs there).
-- Spec: "sliding_window_log n p".
--
-- The log is one mark per instant (requests at one instant share a mark)
-- with the running total of costs up to and including it, oldest first,
-- and the running total before the oldest mark ("dropped").
-- State: "<dropped>|" followed by the marks, 18 bytes each: the instant,
-- then the running total, each as three base-10^7 limbs (a u64 needs at
-- most three), most significant first, each limb in 3 big-endian bytes.
-- Fixed-width marks are read in place: a decision reads the newest mark
-- and binary-searches the log, never parsing all of it, so its work is
-- logarithmic in the log's length apart from Redis copying the value (a
-- commit rewrites the whole value, 18 bytes a mark). A commit keeps only
-- the marks inside the window ending at it, so a stored log holds at most n.
-- While a script runs the state is { dropped, text, off, lo, hi }: mark i
-- starts at byte off + 18(i - 1) + 1 of text; marks lo..hi are the log,
-- those before lo have been dropped since decoding.
-- The limb bytes are exact integers below 2^24, the only plain Lua numbers
-- here besides indices.

local sliding_window_log = {}
ALG.sliding_window_log = sliding_window_log

local MARK = 18

function sliding_window_log.parse(f)
  return {
    n = number_field(f[2], 'n'),
    p = number_field(f[3], 'p'),
  }
end

function sliding_window_log.decode(L, text)
  if text == nil then
    return { dropped = B.ZERO, text = '', off = 0, lo = 1, hi = 0 }
  end
  local bar = string.find(text, '|', 1, true)
  if bar == nil or (#text - bar) % MARK ~= 0 then
    error('tollgate: bad sliding_window_log state')
  end
  return {
    dropped = number_field(string.sub(text, 1, bar - 1), 'sliding_window_log state'),
    text = text,
    off = bar,
    lo = 1,
    hi = (#text - bar) / MARK,
  }
end

-- The bytes of marks i..j.
local function marks_text(st, i, j)
  if j < i then return '' end
  local first = st.off + (i - 1) * MARK + 1
  local last = st.off + j * MARK
  if first == 1 and last == #st.text then return st.text end
  return string.sub(st.text, first, last)
end

function sliding_window_log.encode(L, st)
  return B.str(st.dropped) .. '|' .. marks_text(st, st.lo, st.hi)
end

-- A bigint below 10^21 as 9 bytes.
local function pack_number(a)
  if #a > 3 then
    error('tollgate: sliding_window_log value out of range')
  end
  local bytes = {}
  for i = 3, 1, -1 do
    local limb = a[i] or 0
    local hi = math.floor(limb / 65536)
    local rest = limb - hi * 65536
    local mid = math.floor(rest / 256)
    bytes[#bytes + 1] = string.char(hi, mid, rest - mid * 256)
  end
  return table.concat(bytes)
end

-- The bigint of the 9 bytes of body from offset o.
local function unpack_number(body, o)
  local b1, b2, b3, b4, b5, b6, b7, b8, b9 = string.byte(body, o, o + 8)
  local a = {
    (b7 * 256 + b8) * 256 + b9,
    (b4 * 256 + b5) * 256 + b6,
    (b1 * 256 + b2) * 256 + b3,
  }
  -- No leading zero limbs (bigint.lua's form).
  for i = 3, 1, -1 do
    if a[i] ~= 0 then break end
    a[i] = nil
  end
  return a
end

local function mark_bytes(at, total)
  return pack_number(at) .. pack_number(total)
end

local function at_of(st, i)
  return unpack_number(st.text, st.off + (i - 1) * MARK + 1)
end

local function total_of(st, i)
  return unpack_number(st.text, st.off + (i - 1) * MARK + 10)
end

-- RunningTotals: the newest mark's instant, or nil.
local function newest_at(st)
  if st.hi < st.lo then return nil end
  return at_of(st, st.hi)
end

local function log_total(st)
  if st.hi < st.lo then return st.dropped end
  return total_of(st, st.hi)
end

local function total_before(st, i)
  if i > st.lo then return total_of(st, i - 1) end
  return st.dropped
end

-- The first index in lo..hi (hi + 1 when none) whose mark is not `before`,
-- given that `before` holds for a prefix: a few marks from the front (what
-- has left the window is usually there), then a binary search.
local FRONT_SCAN = 8

local function partition_point(st, before)
  local lo, hi = st.lo, st.hi + 1
  local scan_end = math.min(hi, lo + FRONT_SCAN)
  while lo < scan_end do
    if not before(lo) then return lo end
    lo = lo + 1
  end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if before(mid) then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- Index of the first mark at or after position.
local function first_from(st, position)
  return partition_point(st, function(i)
    return B.cmp(at_of(st, i), position) < 0
  end)
end

-- The costs at or after position.
local function count_from(st, position)
  return B.sub(log_total(st), total_before(st, first_from(st, position)))
end

local function drop_before(st, position)
  local i = first_from(st, position)
  if i > st.lo then
    st.dropped = total_of(st, i - 1)
    st.lo = i
  end
end

-- The index of the oldest mark with a running total of at least target,
-- or nil.
local function first_reaching(st, target)
  local i = partition_point(st, function(j)
    return B.cmp(total_of(st, j), target) < 0
  end)
  if i > st.hi then return nil end
  return i
end

-- Adds cost at position: to the mark there when there is one, as a new
-- mark in order otherwise. Marks from the insertion point on are rewritten
-- (only the newest one, as the log is used: nothing is added before it).
local function add(st, position, cost)
  local index
  local newest = newest_at(st)
  if newest ~= nil and B.cmp(newest, position) < 0 then
    index = st.hi + 1
  else
    index = partition_point(st, function(i)
      return B.cmp(at_of(st, i), position) < 0
    end)
  end
  local parts = { marks_text(st, st.lo, index - 1) }
  if index > st.hi or B.cmp(at_of(st, index), position) ~= 0 then
    parts[#parts + 1] = mark_bytes(position, B.add(total_before(st, index), cost))
  end
  for i = index, st.hi do
    parts[#parts + 1] = mark_bytes(at_of(st, i), B.add(total_of(st, i), cost))
  end
  st.text = table.concat(parts)
  st.off = 0
  st.lo = 1
  st.hi = #st.text / MARK
end

-- The oldest instant inside (t - p, t].
local function window_start(L, t)
  if B.cmp(t, L.p) >= 0 then
    return B.add(B.sub(t, L.p), B.ONE)
  end
  return B.ZERO
end

local function count_inside(L, st, t)
  return count_from(st, window_start(L, t))
end

-- The instant enough marks have left the window for cost to fit, given
-- that it does not fit now.
local function leave_time(L, st, cost)
  local target = B.sub(B.add(log_total(st), cost), L.n)
  local i = first_reaching(st, target)
  if i == nil then return B.ZERO end
  return B.sat64(B.add(at_of(st, i), L.p))
end

function sliding_window_log.expires_at(L, st)
  local newest = newest_at(st)
  if newest == nil then return B.ZERO end
  return B.sat64(B.add(newest, L.p))
end

function sliding_window_log.next_available(L, st, now, cost)
  local from = now
  local newest = newest_at(st)
  if newest ~= nil then from = B.max(now, newest) end
  if B.cmp(B.add(count_inside(L, st, from), cost), L.n) <= 0 then
    return from
  end
  return leave_time(L, st, cost)
end

function sliding_window_log.evaluate(L, st, now, cost)
  local newest = newest_at(st)
  if newest ~= nil and B.cmp(now, newest) < 0 then
    local next_at = sliding_window_log.next_available(L, st, now, cost)
    return queued_decision(L.n, now, next_at, sliding_window_log.expires_at(L, st))
  end
  return tally_decide(L.n, count_inside(L, st, now), now, cost,
    -- A counted request is the newest mark, gone after p.
    function() return B.sat64(B.add(now, L.p)) end,
    function() return sliding_window_log.expires_at(L, st) end,
    function() return leave_time(L, st, cost) end)
end

function sliding_window_log.commit(L, st, now, cost)
  drop_before(st, window_start(L, now))
  add(st, now, cost)
  return nil
end

function sliding_window_log.slot(L, st, now, cost)
  local at = sliding_window_log.next_available(L, st, now, cost)
  return { at = at, wait = B.sub(at, now) }
end

function sliding_window_log.book(L, st, now, slot, cost)
  sliding_window_log.commit(L, st, slot.at, cost)
end
