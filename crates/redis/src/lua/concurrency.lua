-- concurrency: at most n requests in flight, each holding a lease that
-- expires after the lease TTL; a port of tollgate-core's
-- algorithm/concurrency.rs. Leases are kept in grant order, which is also
-- the order of their ids and of their expiries; `commit` returns the new
-- lease's id (the decision's lease), `release` ends one. No reservations.
-- Spec: "concurrency n ttl" (ttl in ns).
-- State: "held next_id <packed rows>" (see packed_rows.lua), one row per
-- lease: id, expiry, cost; oldest first. `held` is the sum of the costs,
-- expired leases included (they are dropped on the next commit).
--
-- expires_at is the Rust one (the last lease's expiry) or next_id when
-- later: a state without leases still carries next_id, and forgetting it
-- before the clock passes it would hand out an id again (the memory store
-- keeps it until a sweep finds the state expired).

function LOADERS.concurrency()
  local Packed = packed_rows()
  local cc = {}

  local ID, EXPIRES, COST = 1, 2, 3

  function cc.parse(f)
    local L = {
      n = number_field(f[2], 'n'),
      ttl = number_field(f[3], 'lease ttl'),
    }
    -- Ids and expiries of live leases span about one TTL.
    local span = B.mul(L.ttl, B.num(4))
    L.room = { span, span, L.n }
    return L
  end

  function cc.decode(L, text)
    if text == nil then
      return { held = B.ZERO, next_id = B.ZERO, leases = Packed.new(L.room) }
    end
    local w, rest = Packed.fields(text, 2)
    return {
      held = number_field(w[1], 'concurrency state'),
      next_id = number_field(w[2], 'concurrency state'),
      leases = Packed.decode(L.room, text, rest),
    }
  end

  function cc.encode(L, st)
    return Packed.encode(st.leases, B.str(st.held) .. ' ' .. B.str(st.next_id) .. ' ')
  end

  local function len(st)
    return Packed.len(st.leases)
  end

  local function last_expiry(st)
    local m = len(st)
    if m == 0 then return B.ZERO end
    return Packed.get(st.leases, m, EXPIRES)
  end

  -- The leases at the front that have expired by now, and what they hold.
  local function expired(st, now)
    local count = Packed.search(st.leases, EXPIRES, now, true) - 1
    local cost = B.ZERO
    for i = 1, count do
      cost = B.add(cost, Packed.get(st.leases, i, COST))
    end
    return count, cost
  end

  local function in_flight(st, now)
    local _, cost = expired(st, now)
    return B.sub(st.held, cost)
  end

  -- When a lease granted at now expires: never before the last one.
  local function lease_expiry(L, st, now)
    return B.max(B.sat64(B.add(now, L.ttl)), last_expiry(st))
  end

  -- The first instant at which enough leases have expired for cost.
  local function frees_at(L, st, now, cost)
    local held = in_flight(st, now)
    if B.cmp(B.add(held, cost), L.n) <= 0 then return now end
    for i = Packed.search(st.leases, EXPIRES, now, true), len(st) do
      held = B.sub(held, Packed.get(st.leases, i, COST))
      if B.cmp(B.add(held, cost), L.n) <= 0 then
        return Packed.get(st.leases, i, EXPIRES)
      end
    end
    return now
  end

  function cc.evaluate(L, st, now, cost)
    local count = in_flight(st, now)
    local after = B.add(count, cost)
    local d
    if B.cmp(after, L.n) <= 0 then
      d = decision(true, L.n)
      d.remaining = B.sub(L.n, after)
      local reset
      if B.is_zero(cost) then
        reset = last_expiry(st)
      else
        reset = lease_expiry(L, st, now)
      end
      d.reset_after = until_ns(now, reset)
    else
      d = decision(false, L.n)
      d.remaining = B.sub(L.n, count)
      d.retry_after = until_ns(now, frees_at(L, st, now, cost))
      d.reset_after = until_ns(now, last_expiry(st))
    end
    return d
  end

  function cc.commit(L, st, now, cost)
    local count, freed = expired(st, now)
    if count > 0 then
      Packed.drop_front(st.leases, count)
      st.held = B.sub(st.held, freed)
    end
    local expires = lease_expiry(L, st, now)
    -- Ids grow with time: an id is never handed out twice.
    local id = B.max(st.next_id, now)
    st.next_id = B.add(id, B.ONE)
    st.held = B.add(st.held, cost)
    Packed.insert(st.leases, len(st) + 1, { id, expires, cost })
    return B.str(id)
  end

  function cc.next_available(L, st, now, cost)
    return frees_at(L, st, now, cost)
  end

  function cc.slot(L, st, now, cost)
    return nil
  end

  function cc.book(L, st, now, slot, cost)
  end

  function cc.expires_at(L, st)
    return B.max(last_expiry(st), st.next_id)
  end

  -- Ends the lease whose id is the decimal text `lease`; true when held.
  function cc.release(L, st, lease)
    local id = B.parse(lease)
    if id == nil then return false end
    local i = Packed.search(st.leases, ID, id, false)
    if i > len(st) or B.cmp(Packed.get(st.leases, i, ID), id) ~= 0 then
      return false
    end
    st.held = B.sub(st.held, Packed.get(st.leases, i, COST))
    Packed.remove(st.leases, i)
    return true
  end

  return cc
end
