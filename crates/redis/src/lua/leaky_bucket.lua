-- leaky_bucket: a shaping queue; a port of tollgate-core's
-- algorithm/leaky_bucket.rs over the bucket arithmetic of bucket.lua (n and
-- p already divided by their gcd). An admitted request's delay is the time
-- to drain what is queued ahead of it; a reservation joins the queue when
-- everything ahead of it has drained, whatever the capacity.
-- Spec: "leaky_bucket n p burst".
-- State: "queue last": the queue level in units of 1/p request and the
-- instant of its last change, which a booked reservation may put ahead of
-- now.

function LOADERS.leaky_bucket()
  local BUCKET = bucket_math()
  local leaky_bucket = {}

  leaky_bucket.parse = BUCKET.parse

  function leaky_bucket.decode(L, text)
    if text == nil then return { queue = B.ZERO, last = B.ZERO } end
    local w = words(text)
    return {
      queue = number_field(w[1], 'leaky_bucket state'),
      last = number_field(w[2], 'leaky_bucket state'),
    }
  end

  function leaky_bucket.encode(L, st)
    return B.str(st.queue) .. ' ' .. B.str(st.last)
  end

  -- The level at now. Before the last change (a booked reservation) the
  -- queue also holds what drains until then.
  local function level(L, st, now)
    if B.cmp(now, st.last) >= 0 then
      return B.sub(st.queue, BUCKET.refill(L, B.sub(now, st.last)))
    end
    return B.add(st.queue, BUCKET.refill(L, B.sub(st.last, now)))
  end

  function leaky_bucket.evaluate(L, st, now, cost)
    local queue = level(L, st, now)
    local after = B.add(queue, BUCKET.units(L, cost))
    local d
    if B.cmp(after, L.cap) <= 0 then
      d = decision(true, L.burst)
      d.remaining = BUCKET.whole_tokens(L, B.sub(L.cap, after))
      d.reset_after = BUCKET.nanos_for(L, after)
      d.delay = BUCKET.nanos_for(L, queue)
    else
      d = decision(false, L.burst)
      d.remaining = BUCKET.whole_tokens(L, B.sub(L.cap, queue))
      d.retry_after = BUCKET.nanos_for(L, B.sub(after, L.cap))
      d.reset_after = BUCKET.nanos_for(L, queue)
    end
    return d
  end

  function leaky_bucket.commit(L, st, now, cost)
    st.queue = B.add(level(L, st, now), BUCKET.units(L, cost))
    st.last = now
    return nil
  end

  function leaky_bucket.next_available(L, st, now, cost)
    local queue = level(L, st, now)
    local over = B.sub(B.add(queue, BUCKET.units(L, cost)), L.cap)
    return B.sat64(B.add(now, BUCKET.nanos_for(L, over)))
  end

  -- The slot is when everything ahead has drained; `wait` is that drain time
  -- even when `at` saturates, as in Rust.
  function leaky_bucket.slot(L, st, now, cost)
    local wait = BUCKET.nanos_for(L, level(L, st, now))
    return { at = B.sat64(B.add(now, wait)), wait = wait }
  end

  function leaky_bucket.book(L, st, now, slot, cost)
    leaky_bucket.commit(L, st, slot.at, cost)
  end

  function leaky_bucket.expires_at(L, st)
    return B.sat64(B.add(st.last, BUCKET.nanos_for(L, st.queue)))
  end

  if RECORDING then
    -- LeakyBucket::record: cost joins the queue at `at`, beyond the
    -- capacity if need be; the level above it drains at the same rate. The
    -- level stops at MOST_UNITS. Returns the whole requests queued, rounded
    -- up.
    function leaky_bucket.record(L, st, at, cost)
      local queue = level(L, st, at)
      if not B.is_zero(cost) then
        queue = B.min(B.add(queue, BUCKET.units(L, cost)), BUCKET.most_units())
        st.queue = queue
        st.last = at
      end
      return BUCKET.tokens_for(L, queue)
    end
  end

  if SETTLING then
    -- LeakyBucket::refund: out of the queue at now (or at the last change,
    -- when later), never below an empty queue.
    function leaky_bucket.refund(L, st, admitted_at, now, cost)
      local at = B.max(now, st.last)
      st.queue = B.sub(level(L, st, at), BUCKET.units(L, cost))
      st.last = at
      return true
    end

    -- LeakyBucket::charge: queued at the admission (or the last change,
    -- when later), as if the request had cost that much: possibly beyond
    -- the burst.
    function leaky_bucket.charge(L, st, admitted_at, now, cost)
      return leaky_bucket.record(L, st, B.max(admitted_at, st.last), cost)
    end
  end

  return leaky_bucket
end
