-- fixed_window: a counter per epoch-aligned window floor(t / p); a port of
-- tollgate-core's algorithm/fixed_window.rs, with the counting decision of
-- algorithm/tally.rs. A reservation that does not fit the current window
-- is booked into the first later window with room; until that window
-- begins, plain checks are rejected.
-- Spec: "fixed_window n p" (p not reduced: windows are aligned to it), or
-- "fixed_window n p calendar ..." for calendar windows (windows.lua).
-- State: "window count": the window index the count belongs to, and the
-- count.

function LOADERS.fixed_window()
  local fixed_window = {}

  local W = windows()

  function fixed_window.parse(f)
    local p = number_field(f[3], 'p')
    return {
      n = number_field(f[2], 'n'),
      p = p,
      win = W.parse(f, p),
    }
  end

  function fixed_window.decode(L, text)
    if text == nil then return { window = B.ZERO, count = B.ZERO } end
    local w = words(text)
    return {
      window = number_field(w[1], 'fixed_window state'),
      count = number_field(w[2], 'fixed_window state'),
    }
  end

  function fixed_window.encode(L, st)
    return B.str(st.window) .. ' ' .. B.str(st.count)
  end

  -- The end of the window numbered window, saturating at u64::MAX.
  local function window_end(L, window)
    return W.get(L.win, window).finish
  end

  -- The count of `window` as the state records it.
  local function count_in(st, window)
    if B.cmp(st.window, window) == 0 then return st.count end
    return B.ZERO
  end

  function fixed_window.evaluate(L, st, now, cost)
    local current = W.at(L.win, now)
    local window = current.index
    if B.cmp(st.window, window) > 0 then
      -- A later window is booked: wait for the queue (tally.rs `queued`).
      local d = decision(false, L.n)
      d.retry_after = until_ns(now, fixed_window.next_available(L, st, now, cost))
      d.reset_after = until_ns(now, fixed_window.expires_at(L, st))
      return d
    end
    local count = count_in(st, window)
    local finish = current.finish
    -- tally.rs `Tally::decide`: reset is the window's end, or now when
    -- nothing is counted (and nothing would be).
    local reset = now
    if not B.is_zero(count) then reset = finish end
    local after = B.add(count, cost)
    local d
    if B.cmp(after, L.n) <= 0 then
      d = decision(true, L.n)
      d.remaining = B.sub(L.n, after)
      if not B.is_zero(cost) then reset = finish end
      d.reset_after = until_ns(now, reset)
    else
      d = decision(false, L.n)
      d.remaining = B.sub(L.n, count)
      d.retry_after = until_ns(now, finish)
      d.reset_after = until_ns(now, reset)
    end
    return d
  end

  function fixed_window.commit(L, st, now, cost)
    local window = W.index_at(L.win, now)
    st.count = B.add(count_in(st, window), cost)
    st.window = window
    return nil
  end

  function fixed_window.next_available(L, st, now, cost)
    local window = B.max(W.index_at(L.win, now), st.window)
    local bounds = W.get(L.win, window)
    if B.cmp(B.add(count_in(st, window), cost), L.n) <= 0 then
      return B.max(now, bounds.start)
    end
    return bounds.finish
  end

  function fixed_window.slot(L, st, now, cost)
    local at = fixed_window.next_available(L, st, now, cost)
    return { at = at, wait = B.sub(at, now) }
  end

  function fixed_window.book(L, st, now, slot, cost)
    fixed_window.commit(L, st, slot.at, cost)
  end

  function fixed_window.expires_at(L, st)
    if B.is_zero(st.count) then return B.ZERO end
    return window_end(L, st.window)
  end

  if RECORDING then
    -- FixedWindow::record: cost added to the count of at's window, beyond
    -- n if need be (refused until the window ends); usage in a window older
    -- than the state's is ignored. The count saturates at u64::MAX - n.
    -- Returns the count of the later of the two windows.
    function fixed_window.record(L, st, at, cost)
      local window = W.index_at(L.win, at)
      if B.cmp(window, st.window) < 0 then return st.count end
      if not B.is_zero(cost) then
        local most = B.sub(B.U64_MAX, L.n)
        st.count = B.min(B.add(count_in(st, window), cost), most)
        st.window = window
      end
      return count_in(st, window)
    end
  end

  if SETTLING then
    -- FixedWindow::refund: into the window the request was counted in,
    -- while the state still holds it and it has not ended; dropped
    -- otherwise (an admission before every calendar window sent lies in a
    -- window that ended long ago).
    function fixed_window.refund(L, st, admitted_at, now, cost)
      local window = W.index_or_older(L.win, admitted_at)
      if window == nil or B.cmp(st.window, window) ~= 0
          or B.cmp(W.index_at(L.win, now), window) > 0 then
        return false
      end
      st.count = B.sub(st.count, cost)
      return true
    end

    -- Algorithm::charge's default: recorded at now, in the current window.
    function fixed_window.charge(L, st, admitted_at, now, cost)
      return fixed_window.record(L, st, now, cost)
    end
  end

  return fixed_window
end
