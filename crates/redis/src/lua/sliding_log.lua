-- sliding_window_log: at most n in any span (t - p, t]; a port of
-- tollgate-core's algorithm/sliding_log.rs over the running totals of
-- algorithm/running_totals.rs (whose marks sit in a small_deque.rs there).
-- Spec: "sliding_window_log n p".
--
-- The log is one mark per instant (requests at one instant share a mark)
-- with the running total of costs up to and including it, oldest first,
-- and the running total before the oldest mark ("dropped").
--
-- State: "<dropped>|" for an empty log, otherwise
-- "<dropped> <newest instant> <newest total> <wa><wt>|" followed by the
-- marks, 3(wa + wt) bytes each: the instant modulo 10^(7 wa), then the
-- running total modulo 10^(7 wt), each as its wa (wt) low base-10^7 limbs,
-- most significant first, each limb in 3 big-endian bytes. A mark's values
-- are the newest ones less the distance between the residues, which is
-- exact while every mark is less than the modulus from the newest. A
-- commit keeps only marks inside the window ending at it, so a stored log
-- spans less than p with at most n in it: wa, wt are the fewest limbs with
-- 10^(7 wa) >= p and 10^(7 wt) > n (9 bytes a mark for 10,000/day; 6 for
-- periods up to 10 ms), or 3 and 3 (whole values) should a log not fit.
-- Fixed-width marks are read in place: a decision reads the header and
-- binary-searches the marks, never parsing all of them, so its work is
-- logarithmic in the log's length apart from Redis copying the value in
-- (and, for a commit, out).
-- While a script runs the state is { dropped, newest_at, newest_total, wa,
-- wt, text, off, lo, hi }: mark i starts at byte off + size(i - 1) + 1 of
-- text; marks lo..hi are the log, those before lo were dropped since text
-- was read or written; text is the stored form unless dirty.
-- The limb bytes are exact integers below 2^24, the only plain Lua numbers
-- here besides indices and widths.

function LOADERS.sliding_window_log()
  local sliding_window_log = {}
  local T = tally()
  local tally_decide, queued_decision = T.decide, T.queued

  -- 10^(7k), the modulus of k limbs, for k = 1, 2, 3 (bigint limbs).
  local LOG_MODULI = { { 0, 1 }, { 0, 0, 1 }, { 0, 0, 0, 1 } }

  -- The fewest limbs (at most 3) whose modulus is at least (above) x.
  local function limbs_for(x, above)
    for k = 1, 2 do
      local c = B.cmp(LOG_MODULI[k], x)
      if c > 0 or (c == 0 and not above) then return k end
    end
    return 3
  end

  function sliding_window_log.parse(f)
    local L = {
      n = number_field(f[2], 'n'),
      p = number_field(f[3], 'p'),
    }
    L.wa = limbs_for(L.p, false)
    L.wt = limbs_for(L.n, true)
    return L
  end

  local function bad_state()
    error('tollgate: bad sliding_window_log state')
  end

  function sliding_window_log.decode(L, text)
    if text == nil then
      return { dropped = B.ZERO, text = '', off = 0, lo = 1, hi = 0, wa = L.wa, wt = L.wt }
    end
    local st = { text = text, lo = 1 }
    local dropped, at, total, wa, wt, off = string.match(text, '^(%d+) (%d+) (%d+) (%d)(%d)|()')
    if dropped == nil then
      dropped, off = string.match(text, '^(%d+)|()')
      if dropped == nil or off ~= #text + 1 then bad_state() end
      st.wa, st.wt, st.hi = L.wa, L.wt, 0
    else
      st.newest_at = B.parse(at)
      st.newest_total = B.parse(total)
      st.wa, st.wt = tonumber(wa), tonumber(wt)
      if st.wa < 1 or st.wa > 3 or st.wt < 1 or st.wt > 3 then bad_state() end
      local size = 3 * (st.wa + st.wt)
      if (#text - off + 1) % size ~= 0 or #text < off then bad_state() end
      st.hi = (#text - off + 1) / size
    end
    st.dropped = B.parse(dropped)
    st.off = off - 1
    return st
  end

  -- The residue of a bigint modulo 10^(7k) as 3k bytes.
  local function pack_residue(a, k)
    local bytes = {}
    for i = k, 1, -1 do
      local limb = a[i] or 0
      local hi = math.floor(limb / 65536)
      local rest = limb - hi * 65536
      local mid = math.floor(rest / 256)
      bytes[#bytes + 1] = string.char(hi, mid, rest - mid * 256)
    end
    return table.concat(bytes)
  end

  -- The bigint of the k limbs (3k bytes) of text from offset o.
  local function unpack_residue(text, o, k)
    local a = {}
    for i = k, 1, -1 do
      local b1, b2, b3 = string.byte(text, o, o + 2)
      a[i] = (b1 * 256 + b2) * 256 + b3
      o = o + 3
    end
    -- No leading zero limbs (bigint.lua's form).
    for i = k, 1, -1 do
      if a[i] ~= 0 then break end
      a[i] = nil
    end
    return a
  end

  -- The bigint residue of a modulo 10^(7k): its k low limbs.
  local function residue(a, k)
    if #a <= k then return a end
    local r = {}
    for i = 1, k do r[i] = a[i] end
    for i = k, 1, -1 do
      if r[i] ~= 0 then break end
      r[i] = nil
    end
    return r
  end

  -- The value whose residue is r, given that it is at most newest and less
  -- than the modulus m below it.
  local function from_residue(newest, r, k)
    local top = residue(newest, k)
    local distance
    if B.cmp(r, top) <= 0 then
      distance = B.sub(top, r)
    else
      distance = B.sub(B.add(top, LOG_MODULI[k]), r)
    end
    return B.sub(newest, distance)
  end

  local function mark_size(st)
    return 3 * (st.wa + st.wt)
  end

  local function at_of(st, i)
    local r = unpack_residue(st.text, st.off + (i - 1) * mark_size(st) + 1, st.wa)
    return from_residue(st.newest_at, r, st.wa)
  end

  local function total_of(st, i)
    local r = unpack_residue(st.text, st.off + (i - 1) * mark_size(st) + 1 + 3 * st.wa, st.wt)
    return from_residue(st.newest_total, r, st.wt)
  end

  -- The bytes of marks i..j as stored.
  local function marks_text(st, i, j)
    if j < i then return '' end
    local size = mark_size(st)
    return string.sub(st.text, st.off + (i - 1) * size + 1, st.off + j * size)
  end

  local function header(st)
    if st.hi < st.lo then return B.str(st.dropped) .. '|' end
    return table.concat({
      B.str(st.dropped), ' ', B.str(st.newest_at), ' ', B.str(st.newest_total), ' ',
      tostring(st.wa), tostring(st.wt), '|',
    })
  end

  function sliding_window_log.encode(L, st)
    if not st.dirty then return st.text end
    return header(st) .. marks_text(st, st.lo, st.hi)
  end

  -- RunningTotals: the newest mark's instant, or nil.
  local function newest_at(st)
    if st.hi < st.lo then return nil end
    return st.newest_at
  end

  local function log_total(st)
    if st.hi < st.lo then return st.dropped end
    return st.newest_total
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
      st.dirty = true
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
  -- (only the newest one, as the log is used: nothing is added before it);
  -- those before it keep their bytes unless the widths change.
  local function add(L, st, position, cost)
    local index
    local newest = newest_at(st)
    if newest ~= nil and B.cmp(newest, position) < 0 then
      index = st.hi + 1
    else
      index = partition_point(st, function(i)
        return B.cmp(at_of(st, i), position) < 0
      end)
    end
    -- The marks from index on, as values.
    local tail = {}
    if index > st.hi or B.cmp(at_of(st, index), position) ~= 0 then
      tail[1] = { position, B.add(total_before(st, index), cost) }
    end
    for i = index, st.hi do
      tail[#tail + 1] = { at_of(st, i), B.add(total_of(st, i), cost) }
    end
    local oldest = tail[1][1]
    if index > st.lo then oldest = at_of(st, st.lo) end
    local at, total = tail[#tail][1], tail[#tail][2]
    -- Widths that hold the new log: the limit's, or whole values.
    local wa, wt = L.wa, L.wt
    if B.cmp(B.sub(at, oldest), LOG_MODULI[wa]) >= 0
        or B.cmp(B.sub(total, st.dropped), LOG_MODULI[wt]) >= 0 then
      wa, wt = 3, 3
    end
    local head = index
    if wa ~= st.wa or wt ~= st.wt then
      -- Rewrite every mark (never, for a log used as the algorithm uses it).
      local all = {}
      for i = st.lo, index - 1 do
        all[#all + 1] = { at_of(st, i), total_of(st, i) }
      end
      for _, m in ipairs(tail) do all[#all + 1] = m end
      tail, head = all, st.lo
    end
    local prefix = marks_text(st, st.lo, head - 1)
    st.newest_at, st.newest_total, st.wa, st.wt = at, total, wa, wt
    st.lo, st.hi = 1, 1
    local parts = { header(st), prefix }
    for _, m in ipairs(tail) do
      parts[#parts + 1] = pack_residue(m[1], wa) .. pack_residue(m[2], wt)
    end
    st.text = table.concat(parts)
    st.off = #parts[1]
    st.hi = (#st.text - st.off) / mark_size(st)
    st.dirty = false
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
    add(L, st, now, cost)
    return nil
  end

  function sliding_window_log.slot(L, st, now, cost)
    local at = sliding_window_log.next_available(L, st, now, cost)
    return { at = at, wait = B.sub(at, now) }
  end

  function sliding_window_log.book(L, st, now, slot, cost)
    sliding_window_log.commit(L, st, slot.at, cost)
  end

  if RECORDING then
    local HALF_U64 = B.parse('9223372036854775807')

    -- RunningTotals::make_room: the totals rebased on the oldest mark
    -- (dropped becomes 0: only differences count), and how much more they
    -- can take before u64::MAX / 2, which a record takes at most. Every
    -- mark's residue changes, so every mark is written anew, with the
    -- widths a writer picks for the rebased log.
    local function make_room(L, st)
      local base = st.dropped
      if not B.is_zero(base) then
        st.dropped = B.ZERO
        if st.hi >= st.lo then
          local marks = {}
          for i = st.lo, st.hi do
            marks[#marks + 1] = { at_of(st, i), B.sub(total_of(st, i), base) }
          end
          local newest = marks[#marks]
          local wa, wt = L.wa, L.wt
          if B.cmp(B.sub(newest[1], marks[1][1]), LOG_MODULI[wa]) >= 0
              or B.cmp(newest[2], LOG_MODULI[wt]) >= 0 then
            wa, wt = 3, 3
          end
          st.newest_at, st.newest_total, st.wa, st.wt = newest[1], newest[2], wa, wt
          st.lo, st.hi = 1, #marks
          local parts = { header(st) }
          for _, m in ipairs(marks) do
            parts[#parts + 1] = pack_residue(m[1], wa) .. pack_residue(m[2], wt)
          end
          st.text = table.concat(parts)
          st.off = #parts[1]
        end
        st.dirty = true
      end
      return B.sub(HALF_U64, log_total(st))
    end

    -- RunningTotals::fold_beyond: keeps only the newest marks that hold
    -- more than `limit` together; the older ones fold into the oldest kept
    -- mark, whose running total already counts them (dropped stays).
    local function fold_beyond(st, limit)
      local total = log_total(st)
      if B.cmp(total, limit) <= 0 then return end
      local keep_from = B.sub(total, limit)
      local first = partition_point(st, function(j)
        return B.cmp(total_of(st, j), keep_from) < 0
      end)
      if first > st.lo then
        st.lo = first
        st.dirty = true
      end
    end

    -- SlidingWindowLog::record: cost logged at `at`, beyond n if need be;
    -- usage before the window of the newest mark is ignored. Once the marks
    -- hold more than n, older marks fold into the newest mark that, with
    -- those after it, still holds more than n (at most n + 1 marks stay).
    -- Returns the count in the window ending at `at` or at the newest mark,
    -- whichever is later.
    function sliding_window_log.record(L, st, at, cost)
      local newest = newest_at(st)
      if newest == nil then newest = at else newest = B.max(newest, at) end
      local start = window_start(L, newest)
      if not B.is_zero(cost) and B.cmp(at, start) >= 0 then
        drop_before(st, start)
        cost = B.min(cost, make_room(L, st))
        if not B.is_zero(cost) then
          add(L, st, at, cost)
          fold_beyond(st, L.n)
        end
      end
      return count_inside(L, st, newest)
    end
  end

  if SETTLING then
    -- The log rewritten as `marks` ({ instant, running total } pairs,
    -- oldest first; the dropped total stays), with the widths a writer
    -- picks for it.
    local function rewrite(L, st, marks)
      st.lo, st.hi, st.dirty = 1, #marks, false
      if #marks == 0 then
        st.wa, st.wt = L.wa, L.wt
        st.text = header(st)
        st.off = #st.text
        return
      end
      local newest = marks[#marks]
      local wa, wt = L.wa, L.wt
      if B.cmp(B.sub(newest[1], marks[1][1]), LOG_MODULI[wa]) >= 0
          or B.cmp(B.sub(newest[2], st.dropped), LOG_MODULI[wt]) >= 0 then
        wa, wt = 3, 3
      end
      st.newest_at, st.newest_total, st.wa, st.wt = newest[1], newest[2], wa, wt
      local parts = { header(st) }
      for _, m in ipairs(marks) do
        parts[#parts + 1] = pack_residue(m[1], wa) .. pack_residue(m[2], wt)
      end
      st.text = table.concat(parts)
      st.off = #parts[1]
    end

    -- RunningTotals::take_at: up to cost off the mark at exactly
    -- position, the mark removed when nothing is left in it, every later
    -- running total lowered as much; false (nothing changed) when there
    -- is no such mark.
    local function take_at(L, st, position, cost)
      local i = first_from(st, position)
      if i > st.hi or B.cmp(at_of(st, i), position) ~= 0 then return false end
      local own = B.sub(total_of(st, i), total_before(st, i))
      local taken = B.min(cost, own)
      local emptied = B.cmp(taken, own) == 0
      local marks = {}
      for j = st.lo, st.hi do
        local total = total_of(st, j)
        if j >= i then total = B.sub(total, taken) end
        if j ~= i or not emptied then
          marks[#marks + 1] = { at_of(st, j), total }
        end
      end
      rewrite(L, st, marks)
      return true
    end

    -- The window ending at now, or at the newest mark when later: its
    -- oldest instant.
    local function oldest_in_play(L, st, now)
      local newest = newest_at(st)
      if newest == nil then newest = now else newest = B.max(newest, now) end
      return window_start(L, newest)
    end

    -- SlidingWindowLog::refund: off the request's mark while it is still
    -- in the window; dropped once it has left, or when its cost was
    -- folded into a later mark.
    function sliding_window_log.refund(L, st, admitted_at, now, cost)
      if B.cmp(admitted_at, oldest_in_play(L, st, now)) < 0 then return false end
      return take_at(L, st, admitted_at, cost)
    end

    -- SlidingWindowLog::charge: at the request's mark while it is still in
    -- the window, as if the request had cost that much; at now once it has
    -- left.
    function sliding_window_log.charge(L, st, admitted_at, now, cost)
      local at = admitted_at
      if B.cmp(admitted_at, oldest_in_play(L, st, now)) < 0 then at = now end
      return sliding_window_log.record(L, st, at, cost)
    end
  end

  return sliding_window_log
end
