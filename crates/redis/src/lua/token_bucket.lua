-- token_bucket: a port of tollgate-core's algorithm/token_bucket.rs over the
-- bucket arithmetic of bucket.lua (n and p already divided by their gcd).
-- Spec: "token_bucket n p burst storage", storage `narrow` or `wide` as
-- Limit::build picks (TokenBucket::<Narrow>::fits).
-- State: "missing last": the units missing from a full bucket (capacity
-- minus the Rust side's signed token count, so never negative) and the
-- instant of the last refill, which a booked reservation may put ahead of
-- now. The Rust token count is `cap - missing`; a Narrow bucket stores it in
-- an i64 saturating at i64::MIN, i.e. `missing` at most `cap + 2^63` (only
-- reachable when reservations pile up at u64::MAX).

function LOADERS.token_bucket()
  local BUCKET = bucket_math()
  local token_bucket = {}

  local TWO_POW_63 = B.parse('9223372036854775808')

  function token_bucket.parse(f)
    local L = BUCKET.parse(f)
    if f[5] == 'narrow' then
      L.max_missing = B.add(L.cap, TWO_POW_63)
    elseif f[5] ~= 'wide' then
      error('tollgate: bad token storage: ' .. tostring(f[5]))
    end
    return L
  end

  function token_bucket.decode(L, text)
    if text == nil then return { missing = B.ZERO, last = B.ZERO } end
    local w = words(text)
    return {
      missing = number_field(w[1], 'token_bucket state'),
      last = number_field(w[2], 'token_bucket state'),
    }
  end

  function token_bucket.encode(L, st)
    return B.str(st.missing) .. ' ' .. B.str(st.last)
  end

  -- Rust `refilled`: tokens at max(now, last) and that instant. Here the units
  -- missing then: cap - min(cap, tokens + refill) = missing - refill (at 0).
  local function refilled(L, st, now)
    local at = B.max(now, st.last)
    return B.sub(st.missing, BUCKET.refill(L, B.sub(at, st.last))), at
  end

  function token_bucket.evaluate(L, st, now, cost)
    local missing, at = refilled(L, st, now)
    local lag = B.sub(at, now)
    local function after_wait(units)
      return B.sat64(B.add(BUCKET.nanos_for(L, units), lag))
    end
    -- cap - (tokens - need): tokens >= need exactly when it is at most cap.
    local short = B.add(missing, BUCKET.units(L, cost))
    local d
    if B.cmp(short, L.cap) <= 0 then
      d = decision(true, L.burst)
      d.remaining = BUCKET.whole_tokens(L, B.sub(L.cap, short))
      d.reset_after = after_wait(short)
    else
      d = decision(false, L.burst)
      -- to_unsigned(tokens): zero when the count is negative.
      d.remaining = BUCKET.whole_tokens(L, B.sub(L.cap, missing))
      d.retry_after = after_wait(B.sub(short, L.cap))
      d.reset_after = after_wait(missing)
    end
    return d
  end

  function token_bucket.commit(L, st, now, cost)
    local missing, at = refilled(L, st, now)
    missing = B.add(missing, BUCKET.units(L, cost))
    if L.max_missing ~= nil then
      missing = B.min(missing, L.max_missing)
    end
    st.missing = missing
    st.last = at
    return nil
  end

  function token_bucket.next_available(L, st, now, cost)
    local missing, at = refilled(L, st, now)
    local short = B.add(missing, BUCKET.units(L, cost))
    if B.cmp(short, L.cap) <= 0 then
      return now
    end
    return B.sat64(B.add(at, BUCKET.nanos_for(L, B.sub(short, L.cap))))
  end

  function token_bucket.slot(L, st, now, cost)
    local at = token_bucket.next_available(L, st, now, cost)
    return { at = at, wait = B.sub(at, now) }
  end

  function token_bucket.book(L, st, now, slot, cost)
    token_bucket.commit(L, st, slot.at, cost)
  end

  function token_bucket.expires_at(L, st)
    return B.sat64(B.add(st.last, BUCKET.nanos_for(L, st.missing)))
  end

  if RECORDING then
    -- TokenBucket::record: cost tokens taken at `at` (or at the last
    -- refill, when that is later), below zero if need be: `missing` beyond
    -- the capacity is the debt, refilled like any missing token. The Rust
    -- count stops at -MOST_UNITS (bucket.rs), and a narrow one at i64::MIN
    -- (max_missing). Returns the whole tokens missing, rounded up.
    function token_bucket.record(L, st, at, cost)
      local missing, t = refilled(L, st, at)
      if not B.is_zero(cost) then
        local most = B.add(L.cap, BUCKET.most_units())
        missing = B.min(B.add(missing, BUCKET.units(L, cost)), most)
        if L.max_missing ~= nil then
          missing = B.min(missing, L.max_missing)
        end
        st.missing = missing
        st.last = t
      end
      return BUCKET.tokens_for(L, missing)
    end
  end

  if SETTLING then
    -- TokenBucket::refund: tokens back at now, never above a full bucket
    -- (`missing` never below zero).
    function token_bucket.refund(L, st, admitted_at, now, cost)
      local missing, at = refilled(L, st, now)
      st.missing = B.sub(missing, BUCKET.units(L, cost))
      st.last = at
      return true
    end

    -- TokenBucket::charge: taken at the admission (or the last refill,
    -- when later), as if the request had cost that much: possibly into
    -- debt.
    function token_bucket.charge(L, st, admitted_at, now, cost)
      return token_bucket.record(L, st, admitted_at, cost)
    end
  end

  return token_bucket
end
