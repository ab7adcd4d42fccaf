-- stepped_window: the Databox stepped sliding window; a port of
-- tollgate-core's algorithm/stepped_window.rs over the running totals of
-- algorithm/running_totals.rs, `record` included (count a call already
-- made, even over the limit, and return the count in the window ending at
-- max(at, the newest step's start)).
--
-- Time is cut into epoch-aligned steps of `step` ns; a step counts while
-- any part of it lies in (t - P, t] (the conservative rule). The state is
-- one mark per non-empty step that may still touch a window: its step index
-- and the running total of costs up to and including it, plus the total of
-- the marks already dropped.
-- Spec: "stepped_window n p step" (p and step in ns).
-- State: "dropped <packed rows>" (see packed_rows.lua), one row per mark:
-- step index, running total; oldest first.

function LOADERS.stepped_window()
  local Packed = packed_rows()
  local sw = {}

  local AT, TOTAL = 1, 2

  function sw.parse(f)
    local L = {
      n = number_field(f[2], 'n'),
      p = number_field(f[3], 'p'),
      step = number_field(f[4], 'step'),
    }
    if B.is_zero(L.step) then error('tollgate: bad step: 0') end
    -- P = whole x step + extra.
    L.whole, L.extra = B.divmod(L.p, L.step)
    L.lag = B.is_zero(L.extra) and L.whole or B.add(L.whole, B.ONE)
    -- Marks span at most whole + 2 steps, and a window admits about n.
    L.room = { B.mul(B.add(L.whole, B.num(2)), B.num(4)), B.mul(L.n, B.num(10)) }
    return L
  end

  function sw.decode(L, text)
    if text == nil then
      return { dropped = B.ZERO, marks = Packed.new(L.room) }
    end
    local w, rest = Packed.fields(text, 1)
    return {
      dropped = number_field(w[1], 'stepped_window state'),
      marks = Packed.decode(L.room, text, rest),
    }
  end

  function sw.encode(L, st)
    return Packed.encode(st.marks, B.str(st.dropped) .. ' ')
  end

  -- The running totals (running_totals.rs), marks indexed from 1.

  local function len(st)
    return Packed.len(st.marks)
  end

  local function newest_at(st)
    local m = len(st)
    if m == 0 then return nil end
    return Packed.get(st.marks, m, AT)
  end

  local function total(st)
    local m = len(st)
    if m == 0 then return st.dropped end
    return Packed.get(st.marks, m, TOTAL)
  end

  local function total_before(st, i)
    if i > 1 then return Packed.get(st.marks, i - 1, TOTAL) end
    return st.dropped
  end

  -- Index of the first mark at or after `position`.
  local function first_from(st, position)
    return Packed.search(st.marks, AT, position, false)
  end

  local function count_from(st, position)
    return B.sub(total(st), total_before(st, first_from(st, position)))
  end

  local function drop_before(st, position)
    local i = first_from(st, position)
    if i > 1 then
      st.dropped = Packed.get(st.marks, i - 1, TOTAL)
      Packed.drop_front(st.marks, i - 1)
    end
  end

  -- The step of the oldest mark whose running total is at least target.
  local function first_reaching(st, target)
    local i = Packed.search(st.marks, TOTAL, target, false)
    if i > len(st) then return nil end
    return Packed.get(st.marks, i, AT)
  end

  local function add(st, position, cost)
    local m = len(st)
    local newest = newest_at(st)
    if newest == nil or B.cmp(newest, position) < 0 then
      Packed.insert(st.marks, m + 1, { position, B.add(total(st), cost) })
      return
    end
    if B.cmp(newest, position) == 0 then
      Packed.set(st.marks, m, { position, B.add(total(st), cost) })
      return
    end
    -- Out of order: a mark in the middle, every later total moves.
    local index = first_from(st, position)
    local rows = Packed.rows(st.marks)
    if index > m or B.cmp(rows[index][AT], position) ~= 0 then
      table.insert(rows, index, { position, total_before(st, index) })
    end
    for i = index, #rows do
      rows[i] = { rows[i][AT], B.add(rows[i][TOTAL], cost) }
    end
    Packed.assign(st.marks, rows)
  end

  -- The window (stepped_window.rs).

  -- t's step and the ns into it; remembers the last instant, which a
  -- decision asks for twice.
  local function div_step(L, t)
    if L.memo_t == nil or B.cmp(L.memo_t, t) ~= 0 then
      L.memo_t = t
      L.memo_q, L.memo_r = B.divmod(t, L.step)
    end
    return L.memo_q, L.memo_r
  end

  -- The oldest step that touches (t - P, t].
  local function oldest_touching(L, t)
    if B.cmp(t, L.p) < 0 then return B.ZERO end
    local a, b = div_step(L, t)
    local oldest = B.sub(a, L.whole)
    if B.cmp(b, L.extra) < 0 then oldest = B.sub(oldest, B.ONE) end
    return oldest
  end

  local function oldest_touching_step(L, step)
    return B.sub(step, L.lag)
  end

  local function count_at(L, st, t)
    return count_from(st, oldest_touching(L, t))
  end

  -- The first instant at which `step` no longer touches the window.
  local function step_leaves(L, step)
    local next_step = B.sat64(B.add(step, B.ONE))
    return B.sat64(B.add(B.sat64(B.mul(next_step, L.step)), L.p))
  end

  local function leave_time(L, st, cost)
    local target = B.sub(B.add(total(st), cost), L.n)
    local at = first_reaching(st, target)
    if at == nil then return B.ZERO end
    return step_leaves(L, at)
  end

  local function pending(L, st, now)
    local newest = newest_at(st)
    return newest ~= nil and B.cmp(now, B.sat64(B.mul(newest, L.step))) < 0
  end

  -- Counts cost at `at` whatever the limit says.
  local function record(L, st, at, cost)
    if B.is_zero(cost) then return end
    local step = (div_step(L, at))
    local newest = newest_at(st)
    if newest == nil then
      newest = step
    else
      newest = B.max(newest, step)
    end
    local oldest = oldest_touching_step(L, newest)
    if B.cmp(step, oldest) < 0 then return end
    drop_before(st, oldest)
    add(st, step, cost)
  end

  function sw.expires_at(L, st)
    local newest = newest_at(st)
    if newest == nil then return B.ZERO end
    return step_leaves(L, newest)
  end

  function sw.next_available(L, st, now, cost)
    local from = now
    local newest = newest_at(st)
    if newest ~= nil then
      from = B.max(now, B.sat64(B.mul(newest, L.step)))
    end
    if B.cmp(B.add(count_at(L, st, from), cost), L.n) <= 0 then
      return from
    end
    return leave_time(L, st, cost)
  end

  function sw.evaluate(L, st, now, cost)
    local d
    if pending(L, st, now) then
      -- Booked requests still queued (tally.rs `queued`).
      d = decision(false, L.n)
      d.retry_after = until_ns(now, sw.next_available(L, st, now, cost))
      d.reset_after = until_ns(now, sw.expires_at(L, st))
      return d
    end
    local count = count_at(L, st, now)
    local after = B.add(count, cost)
    if B.cmp(after, L.n) <= 0 then
      d = decision(true, L.n)
      d.remaining = B.sub(L.n, after)
      local reset
      if B.is_zero(cost) then
        reset = sw.expires_at(L, st)
      else
        -- A counted request lands in the newest step, now's.
        reset = step_leaves(L, (div_step(L, now)))
      end
      d.reset_after = until_ns(now, reset)
    else
      d = decision(false, L.n)
      d.remaining = B.sub(L.n, count)
      d.retry_after = until_ns(now, leave_time(L, st, cost))
      d.reset_after = until_ns(now, sw.expires_at(L, st))
    end
    return d
  end

  function sw.commit(L, st, now, cost)
    record(L, st, now, cost)
    return nil
  end

  function sw.slot(L, st, now, cost)
    local at = sw.next_available(L, st, now, cost)
    return { at = at, wait = B.sub(at, now) }
  end

  function sw.book(L, st, now, slot, cost)
    record(L, st, slot.at, cost)
  end

  if RECORDING then
    local HALF_U64 = B.parse('9223372036854775807')

    -- RunningTotals::make_room: the totals rebased on the oldest mark
    -- (dropped becomes 0: only differences count), and how much more they
    -- can take before u64::MAX / 2, which a record takes at most.
    local function make_room(st)
      if not B.is_zero(st.dropped) then
        local base = st.dropped
        local marks = st.marks
        if B.cmp(marks.base[TOTAL], base) >= 0 then
          -- Every stored field is a distance from the column's base.
          marks.base[TOTAL] = B.sub(marks.base[TOTAL], base)
        else
          local rows = Packed.rows(marks)
          for i, r in ipairs(rows) do
            rows[i] = { r[AT], B.sub(r[TOTAL], base) }
          end
          Packed.assign(marks, rows)
        end
        st.dropped = B.ZERO
      end
      return B.sub(HALF_U64, total(st))
    end

    -- SteppedWindow::record: counts cost at `now` whatever the limit says
    -- (at most what make_room leaves once the steps that can touch no
    -- window have gone) and returns the count in the window ending at `now`
    -- or at the newest step's start, whichever is later.
    function sw.record(L, st, now, cost)
      local step = (div_step(L, now))
      local newest = newest_at(st)
      if newest == nil then newest = step else newest = B.max(newest, step) end
      local oldest = oldest_touching_step(L, newest)
      if not B.is_zero(cost) and B.cmp(step, oldest) >= 0 then
        drop_before(st, oldest)
        cost = B.min(cost, make_room(st))
        if not B.is_zero(cost) then add(st, step, cost) end
      end
      local newest_start = B.ZERO
      if newest_at(st) ~= nil then newest_start = B.sat64(B.mul(newest_at(st), L.step)) end
      return count_at(L, st, B.max(now, newest_start))
    end
  end

  if SETTLING then
    -- SteppedWindow::oldest_in_play: the oldest step that still counts in
    -- the window ending at now, or at the newest step when later.
    local function oldest_in_play(L, st, now)
      local step = (div_step(L, now))
      local newest = newest_at(st)
      if newest ~= nil then step = B.max(newest, step) end
      return oldest_touching_step(L, step)
    end

    -- RunningTotals::take_at: up to cost off the mark of `step`, the mark
    -- removed when nothing is left in it, every later running total
    -- lowered as much; false (nothing changed) when there is none.
    local function take_at(st, step, cost)
      local i = first_from(st, step)
      if i > len(st) or B.cmp(Packed.get(st.marks, i, AT), step) ~= 0 then return false end
      local own = B.sub(Packed.get(st.marks, i, TOTAL), total_before(st, i))
      local taken = B.min(cost, own)
      local emptied = B.cmp(taken, own) == 0
      local rows = {}
      for j, r in ipairs(Packed.rows(st.marks)) do
        if j ~= i or not emptied then
          local total = r[TOTAL]
          if j >= i then total = B.sub(total, taken) end
          rows[#rows + 1] = { r[AT], total }
        end
      end
      Packed.assign(st.marks, rows)
      return true
    end

    -- SteppedWindow::refund: off the request's step while that step is
    -- still in the window; dropped once it has left.
    function sw.refund(L, st, admitted_at, now, cost)
      local step = (div_step(L, admitted_at))
      if B.cmp(step, oldest_in_play(L, st, now)) < 0 then return false end
      return take_at(st, step, cost)
    end

    -- SteppedWindow::charge: in the request's step while that step is
    -- still in the window, as if the request had cost that much; in now's
    -- step once it has left.
    function sw.charge(L, st, admitted_at, now, cost)
      local step = (div_step(L, admitted_at))
      local at = admitted_at
      if B.cmp(step, oldest_in_play(L, st, now)) < 0 then at = now end
      return sw.record(L, st, at, cost)
    end
  end

  return sw
end
