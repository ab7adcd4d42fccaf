-- gcra: the theoretical arrival time (TAT) in units of 1/n ns; a port of
-- tollgate-core's algorithm/gcra.rs over the bucket arithmetic of
-- algorithm/bucket.rs (n and p already divided by their gcd).
-- Spec: "gcra n p burst". State: "tat".

function LOADERS.gcra()
  local gcra = {}

  function gcra.parse(f)
    local L = {
      n = number_field(f[2], 'n'),
      p = number_field(f[3], 'p'),
      burst = number_field(f[4], 'burst'),
    }
    L.cap = B.mul(L.burst, L.p)
    return L
  end

  function gcra.decode(L, text)
    if text == nil then return { tat = B.ZERO } end
    return { tat = number_field(text, 'gcra state') }
  end

  function gcra.encode(L, st)
    return B.str(st.tat)
  end

  local function whole_tokens(L, units)
    return B.sat64(B.div_floor(units, L.p))
  end

  local function nanos_for(L, units)
    return B.sat64(B.div_ceil(units, L.n))
  end

  function gcra.evaluate(L, st, now, cost)
    local tn = B.mul(now, L.n)
    local base = B.max(st.tat, tn)
    local new_tat = B.add(base, B.mul(cost, L.p))
    local ahead = B.sub(new_tat, tn)
    local d
    if B.cmp(ahead, L.cap) <= 0 then
      d = decision(true, L.burst)
      d.remaining = whole_tokens(L, B.sub(L.cap, ahead))
      d.reset_after = nanos_for(L, ahead)
    else
      d = decision(false, L.burst)
      d.remaining = whole_tokens(L, B.sub(L.cap, B.sub(base, tn)))
      d.retry_after = nanos_for(L, B.sub(ahead, L.cap))
      d.reset_after = nanos_for(L, B.sub(base, tn))
    end
    return d
  end

  function gcra.commit(L, st, now, cost)
    st.tat = B.add(B.max(st.tat, B.mul(now, L.n)), B.mul(cost, L.p))
    return nil
  end

  function gcra.next_available(L, st, now, cost)
    local tn = B.mul(now, L.n)
    local needed = B.add(B.max(st.tat, tn), B.mul(cost, L.p))
    local earliest = B.sub(needed, L.cap)
    return B.max(now, B.sat64(B.div_ceil(earliest, L.n)))
  end

  function gcra.slot(L, st, now, cost)
    local at = gcra.next_available(L, st, now, cost)
    return { at = at, wait = B.sub(at, now) }
  end

  function gcra.book(L, st, now, slot, cost)
    gcra.commit(L, st, slot.at, cost)
  end

  function gcra.expires_at(L, st)
    return B.sat64(B.div_ceil(st.tat, L.n))
  end

  if RECORDING then
    local BUCKET = bucket_math()
    local U128_MAX = B.parse('340282366920938463463374607431768211455')

    -- Gcra::record: the TAT moves on by cost emission intervals from `at`
    -- (or from the TAT, when later), past the burst's tolerance if need be:
    -- the TAT beyond at + burst intervals is a debt, paid back exactly when
    -- the token bucket's would be. The TAT stops at MOST_UNITS past `at`
    -- (or where it was) and at u128::MAX, as in Rust. Returns the whole
    -- intervals between `at` and the TAT, rounded up.
    function gcra.record(L, st, at, cost)
      local tn = B.mul(at, L.n)
      local tat = st.tat
      if not B.is_zero(cost) then
        local most = B.min(B.add(tn, BUCKET.most_units()), U128_MAX)
        local moved = B.min(B.add(B.max(tat, tn), B.mul(cost, L.p)), U128_MAX)
        tat = B.min(moved, B.max(most, tat))
        st.tat = tat
      end
      return BUCKET.tokens_for(L, B.sub(tat, tn))
    end
  end

  if SETTLING then
    -- Gcra::refund: the TAT moves back by the refunded emission intervals,
    -- never before now (a full bucket).
    function gcra.refund(L, st, admitted_at, now, cost)
      local tn = B.mul(now, L.n)
      if B.cmp(st.tat, tn) > 0 then
        st.tat = B.max(B.sub(st.tat, B.mul(cost, L.p)), tn)
      end
      return true
    end

    -- Gcra::charge: taken at the admission, as if the request had cost
    -- that much: possibly into debt.
    function gcra.charge(L, st, admitted_at, now, cost)
      return gcra.record(L, st, admitted_at, cost)
    end
  end

  return gcra
end
