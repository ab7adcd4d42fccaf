-- Where fixed_window's and sliding_window_counter's windows lie; a port of
-- tollgate-core's algorithm/windows.rs. Epoch windows are [k*p, (k+1)*p)
-- for window k. A calendar limit's spec carries, after "n p", the words
-- "calendar <unit> <anchor> <zone> <i0> <s0> <s1> ... <sk>": the store has
-- computed, in Rust, the windows numbered i0 .. i0+k-1 around its clock as
-- their starts (window i0+j is [sj, sj+1)); the script decides only
-- instants among them, and windows among them or older, and answers an
-- error for a later one (a reservation booked further ahead).
-- Spec fields from index 4 on (f[4] == 'calendar').

local windows = lazy(function()
  local W = {}

  -- The windows of a spec's fields f (n at f[2], p at f[3]).
  function W.parse(f, p)
    if f[4] ~= 'calendar' then
      return { p = p }
    end
    local first = number_field(f[8], 'calendar window')
    local starts = {}
    for i = 9, #f do
      starts[#starts + 1] = number_field(f[i], 'calendar window start')
    end
    if #starts < 2 then error('tollgate: a calendar spec needs two window starts or more') end
    return { first = first, starts = starts }
  end

  -- The window numbered index: { index =, start =, finish = }.
  function W.get(win, index)
    if win.p ~= nil then
      return {
        index = index,
        start = B.sat64(B.mul(index, win.p)),
        finish = B.sat64(B.mul(B.add(index, B.ONE), win.p)),
      }
    end
    if B.cmp(index, win.first) < 0 then
      -- A window older than those sent (a state last counted windows
      -- ago) ended before the first of them, so before any instant
      -- decided: its bounds are only ever compared with such an instant
      -- (a start under max(now, ...), an expiry at or before now), and 0
      -- compares as its real bounds do.
      return { index = index, start = B.ZERO, finish = B.ZERO }
    end
    local j = B.approx(B.sub(index, win.first)) + 1
    if j < #win.starts then
      return { index = index, start = win.starts[j], finish = win.starts[j + 1] }
    end
    error('tollgate: calendar window ' .. B.str(index) .. ' is not among those sent')
  end

  -- The window holding t.
  function W.at(win, t)
    if win.p ~= nil then
      local index = B.div_floor(t, win.p)
      return {
        index = index,
        start = B.mul(index, win.p),
        finish = B.sat64(B.mul(B.add(index, B.ONE), win.p)),
      }
    end
    for j = 1, #win.starts - 1 do
      if B.cmp(win.starts[j], t) <= 0 and B.cmp(t, win.starts[j + 1]) < 0 then
        return {
          index = B.add(win.first, B.num(j - 1)),
          start = win.starts[j],
          finish = win.starts[j + 1],
        }
      end
    end
    error('tollgate: instant ' .. B.str(t) .. ' is outside the calendar windows sent')
  end

  -- The number of the window holding t.
  function W.index_at(win, t)
    if win.p ~= nil then return B.div_floor(t, win.p) end
    return W.at(win, t).index
  end

  -- The number of the window holding t, or nil when t lies before every
  -- calendar window sent: a window that ended at least as many windows
  -- before the call's instant as the call carries (a settled request's
  -- admission, which only ever needs to know that its window has ended).
  function W.index_or_older(win, t)
    if win.p == nil and B.cmp(t, win.starts[1]) < 0 then return nil end
    return W.index_at(win, t)
  end

  -- The length of window w in ns (at least 1): p for epoch windows.
  function W.len(win, w)
    if win.p ~= nil then return win.p end
    return B.max(B.sub(w.finish, w.start), B.ONE)
  end

  return W
end)
