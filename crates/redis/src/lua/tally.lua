-- The counting decision shared by the window algorithms: a port of
-- tollgate-core's algorithm/tally.rs, for sliding_log.lua and
-- sliding_counter.lua. Built on first use (see algorithms.lua): returns
-- { decide = tally_decide, queued = queued_decision }.

local tally = lazy(function()
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

  return { decide = tally_decide, queued = queued_decision }
end)
