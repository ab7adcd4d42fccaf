-- sliding_window_counter: two epoch-aligned window counts, the previous one
-- weighted by how much of it still overlaps the sliding window; a port of
-- tollgate-core's algorithm/sliding_counter.rs (with tally_decide and
-- queued_decision from tally.lua).
-- Admitted when floor(prev * (p - elapsed) / p) + curr + cost <= n.
-- Spec: "sliding_window_counter n p".
-- State: "window prev curr booked_until" (window = floor(t / p)).

function LOADERS.sliding_window_counter()
  local sliding_window_counter = {}
  local T = tally()
  local tally_decide, queued_decision = T.decide, T.queued

  function sliding_window_counter.parse(f)
    return {
      n = number_field(f[2], 'n'),
      p = number_field(f[3], 'p'),
    }
  end

  function sliding_window_counter.decode(L, text)
    if text == nil then
      return { window = B.ZERO, prev = B.ZERO, curr = B.ZERO, booked_until = B.ZERO }
    end
    local f = words(text)
    if #f ~= 4 then
      error('tollgate: bad sliding_window_counter state: ' .. text)
    end
    local what = 'sliding_window_counter state'
    return {
      window = number_field(f[1], what),
      prev = number_field(f[2], what),
      curr = number_field(f[3], what),
      booked_until = number_field(f[4], what),
    }
  end

  function sliding_window_counter.encode(L, st)
    return table.concat({ B.str(st.window), B.str(st.prev), B.str(st.curr), B.str(st.booked_until) }, ' ')
  end

  -- (prev, curr) as seen from window, which is not before the state's.
  local function swc_counts(st, window)
    if B.cmp(st.window, window) == 0 then
      return st.prev, st.curr
    elseif B.cmp(B.add(st.window, B.ONE), window) == 0 then
      return st.curr, B.ZERO
    end
    return B.ZERO, B.ZERO
  end

  local function swc_weighted(L, prev, elapsed)
    return B.sat64(B.div_floor(B.mul(prev, B.sub(L.p, elapsed)), L.p))
  end

  -- The first elapsed time (ns into the window) from which
  -- floor(prev * (p - e) / p) <= room.
  local function swc_first_elapsed_within(L, prev, room)
    if B.cmp(prev, room) <= 0 then return B.ZERO end
    -- prev * (p - e) < (room + 1) * p  <=>  e > p * (prev - room - 1) / prev
    local k = B.sub(B.sub(prev, room), B.ONE)
    return B.sat64(B.add(B.div_floor(B.mul(L.p, k), prev), B.ONE))
  end

  -- The first instant at or after from at which cost fits, counting from a
  -- state whose counts are (prev, curr) in from's window; like every
  -- instant, saturated at 2^64 - 1 ns as the core's are.
  local function swc_first_fit(L, prev, curr, cost, from)
    local start = B.mul(B.div_floor(from, L.p), L.p)
    -- This window, the next (this one's count becomes prev), the one after
    -- (both empty: always fits, since cost <= n).
    local candidates = {
      { prev, curr, start },
      { curr, B.ZERO, B.add(start, L.p) },
    }
    for _, c in ipairs(candidates) do
      local used = B.add(c[2], cost)
      if B.cmp(used, L.n) <= 0 then
        local e = swc_first_elapsed_within(L, c[1], B.sub(L.n, used))
        if B.cmp(e, L.p) < 0 then
          return B.sat64(B.max(from, B.add(c[3], e)))
        end
      end
    end
    return B.sat64(B.add(start, B.add(L.p, L.p)))
  end

  -- When a state with these counts in window stops weighing anything.
  local function swc_quiet_from(L, window, prev, curr)
    local start = B.sat64(B.mul(window, L.p))
    if not B.is_zero(curr) then
      return B.sat64(B.add(B.add(start, L.p), swc_first_elapsed_within(L, curr, B.ZERO)))
    elseif not B.is_zero(prev) then
      return B.sat64(B.add(start, swc_first_elapsed_within(L, prev, B.ZERO)))
    end
    return B.ZERO
  end

  function sliding_window_counter.expires_at(L, st)
    return B.max(swc_quiet_from(L, st.window, st.prev, st.curr), st.booked_until)
  end

  function sliding_window_counter.next_available(L, st, now, cost)
    local from = B.max(B.max(now, st.booked_until), B.sat64(B.mul(st.window, L.p)))
    local prev, curr = swc_counts(st, B.div_floor(from, L.p))
    return swc_first_fit(L, prev, curr, cost, from)
  end

  function sliding_window_counter.evaluate(L, st, now, cost)
    local window = B.div_floor(now, L.p)
    if B.cmp(now, st.booked_until) < 0 or B.cmp(window, st.window) < 0 then
      local next_at = sliding_window_counter.next_available(L, st, now, cost)
      return queued_decision(L.n, now, next_at, sliding_window_counter.expires_at(L, st))
    end
    local prev, curr = swc_counts(st, window)
    local count = B.add(swc_weighted(L, prev, B.sub(now, B.mul(window, L.p))), curr)
    return tally_decide(L.n, count, now, cost,
      function() return swc_quiet_from(L, window, prev, B.add(curr, cost)) end,
      function() return swc_quiet_from(L, window, prev, curr) end,
      function() return swc_first_fit(L, prev, curr, cost, now) end)
  end

  function sliding_window_counter.commit(L, st, now, cost)
    local window = B.div_floor(now, L.p)
    local prev, curr = swc_counts(st, window)
    st.window = window
    st.prev = prev
    st.curr = B.add(curr, cost)
    return nil
  end

  function sliding_window_counter.slot(L, st, now, cost)
    local at = sliding_window_counter.next_available(L, st, now, cost)
    return { at = at, wait = B.sub(at, now) }
  end

  function sliding_window_counter.book(L, st, now, slot, cost)
    sliding_window_counter.commit(L, st, slot.at, cost)
    st.booked_until = B.max(st.booked_until, slot.at)
  end

  if RECORDING then
    -- SlidingWindowCounter::record: cost added to the count of at's window
    -- (the state's, a later one, or the one before the state's), beyond n if
    -- need be; older usage is ignored. Counts saturate at (u64::MAX - n) / 2.
    -- Returns the weighted count at `at`, or at the start of the state's
    -- window when that is later.
    function sliding_window_counter.record(L, st, at, cost)
      local window = B.div_floor(at, L.p)
      if not B.is_zero(cost) then
        local most = B.div_floor(B.sub(B.U64_MAX, L.n), B.num(2))
        if B.cmp(window, st.window) >= 0 then
          local prev, curr = swc_counts(st, window)
          st.window = window
          st.prev = prev
          st.curr = B.min(B.add(curr, cost), most)
        elseif B.cmp(B.add(window, B.ONE), st.window) == 0 then
          st.prev = B.min(B.add(st.prev, cost), most)
        end
      end
      local t = B.max(at, B.sat64(B.mul(st.window, L.p)))
      local w = B.div_floor(t, L.p)
      local prev, curr = swc_counts(st, w)
      local start = B.sat64(B.mul(w, L.p))
      return B.sat64(B.add(swc_weighted(L, prev, B.sub(t, start)), curr))
    end
  end

  return sliding_window_counter
end
