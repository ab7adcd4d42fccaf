-- sliding_window_counter: two epoch-aligned window counts, the previous one
-- weighted by how much of it still overlaps the sliding window; a port of
-- tollgate-core's algorithm/sliding_counter.rs (with tally_decide and
-- queued_decision from tally.lua).
-- Admitted when floor(prev * (p - elapsed) / p) + curr + cost <= n.
-- On calendar windows (windows.lua) p is the length of the window at hand.
-- Spec: "sliding_window_counter n p", or "... n p calendar ..." for
-- calendar windows.
-- State: "window prev curr booked_until" (window = floor(t / p), or the
-- calendar's window number).

function LOADERS.sliding_window_counter()
  local sliding_window_counter = {}
  local T = tally()
  local tally_decide, queued_decision = T.decide, T.queued

  local W = windows()

  function sliding_window_counter.parse(f)
    local p = number_field(f[3], 'p')
    return {
      n = number_field(f[2], 'n'),
      p = p,
      win = W.parse(f, p),
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

  -- prev weighed at elapsed ns into a window of len ns.
  local function swc_weighted(prev, elapsed, len)
    return B.sat64(B.div_floor(B.mul(prev, B.sub(len, elapsed)), len))
  end

  -- The first elapsed time (ns into a window of len ns) from which
  -- floor(prev * (len - e) / len) <= room.
  local function swc_first_elapsed_within(prev, room, len)
    if B.cmp(prev, room) <= 0 then return B.ZERO end
    -- prev * (p - e) < (room + 1) * p  <=>  e > p * (prev - room - 1) / prev
    local k = B.sub(B.sub(prev, room), B.ONE)
    return B.sat64(B.add(B.div_floor(B.mul(len, k), prev), B.ONE))
  end

  -- The first instant at or after from at which cost fits, counting from a
  -- state whose counts are (prev, curr) in from's window; like every
  -- instant, saturated at 2^64 - 1 ns as the core's are.
  local function swc_first_fit(L, prev, curr, cost, from)
    local window = W.at(L.win, from)
    local next_window = W.get(L.win, B.add(window.index, B.ONE))
    -- This window, the next (this one's count becomes prev), the one after
    -- (both empty: always fits, since cost <= n).
    local candidates = {
      { prev, curr, window },
      { curr, B.ZERO, next_window },
    }
    for _, c in ipairs(candidates) do
      local used = B.add(c[2], cost)
      if B.cmp(used, L.n) <= 0 then
        local len = W.len(L.win, c[3])
        local e = swc_first_elapsed_within(c[1], B.sub(L.n, used), len)
        if B.cmp(e, len) < 0 then
          return B.sat64(B.max(from, B.add(c[3].start, e)))
        end
      end
    end
    return next_window.finish
  end

  -- When a state with these counts in window stops weighing anything.
  local function swc_quiet_from(L, window, prev, curr)
    if not B.is_zero(curr) then
      local next_window = W.get(L.win, B.add(window, B.ONE))
      local len = W.len(L.win, next_window)
      return B.sat64(B.add(next_window.start, swc_first_elapsed_within(curr, B.ZERO, len)))
    elseif not B.is_zero(prev) then
      local current = W.get(L.win, window)
      local len = W.len(L.win, current)
      return B.sat64(B.add(current.start, swc_first_elapsed_within(prev, B.ZERO, len)))
    end
    return B.ZERO
  end

  function sliding_window_counter.expires_at(L, st)
    return B.max(swc_quiet_from(L, st.window, st.prev, st.curr), st.booked_until)
  end

  function sliding_window_counter.next_available(L, st, now, cost)
    local from = B.max(B.max(now, st.booked_until), W.get(L.win, st.window).start)
    local prev, curr = swc_counts(st, W.index_at(L.win, from))
    return swc_first_fit(L, prev, curr, cost, from)
  end

  function sliding_window_counter.evaluate(L, st, now, cost)
    local current = W.at(L.win, now)
    local window = current.index
    if B.cmp(now, st.booked_until) < 0 or B.cmp(window, st.window) < 0 then
      local next_at = sliding_window_counter.next_available(L, st, now, cost)
      return queued_decision(L.n, now, next_at, sliding_window_counter.expires_at(L, st))
    end
    local prev, curr = swc_counts(st, window)
    local count = B.add(swc_weighted(prev, B.sub(now, current.start), W.len(L.win, current)), curr)
    return tally_decide(L.n, count, now, cost,
      function() return swc_quiet_from(L, window, prev, B.add(curr, cost)) end,
      function() return swc_quiet_from(L, window, prev, curr) end,
      function() return swc_first_fit(L, prev, curr, cost, now) end)
  end

  function sliding_window_counter.commit(L, st, now, cost)
    local window = W.index_at(L.win, now)
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
      local window = W.index_at(L.win, at)
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
      local t = B.max(at, W.get(L.win, st.window).start)
      local current = W.at(L.win, t)
      local prev, curr = swc_counts(st, current.index)
      local weighted = swc_weighted(prev, B.sub(t, current.start), W.len(L.win, current))
      return B.sat64(B.add(weighted, curr))
    end
  end

  if SETTLING then
    -- SlidingWindowCounter::refund: into the window the request was
    -- counted in while it still weighs in decisions (the current one or,
    -- weighted, the previous one); dropped once it has ended for good.
    function sliding_window_counter.refund(L, st, admitted_at, now, cost)
      local window = W.index_or_older(L.win, admitted_at)
      if window == nil then return false end
      local next_window = B.sat64(B.add(window, B.ONE))
      if B.cmp(W.index_at(L.win, now), next_window) > 0 then return false end
      if B.cmp(st.window, window) == 0 then
        st.curr = B.sub(st.curr, cost)
      elseif B.cmp(next_window, st.window) == 0 then
        st.prev = B.sub(st.prev, cost)
      else
        return false
      end
      return true
    end

    -- Algorithm::charge's default: recorded at now, in the current window.
    function sliding_window_counter.charge(L, st, admitted_at, now, cost)
      return sliding_window_counter.record(L, st, now, cost)
    end
  end

  return sliding_window_counter
end
