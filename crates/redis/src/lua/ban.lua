-- ban: the penalty box around any limit; a port of tollgate-core's ban.rs
-- (`Ban`, `BanState`), with the same integer arithmetic and decisions.
-- A limit with a ban comes with "ban after within for " (within and for in
-- ns) before its algorithm's spec. Its state lives in the hash field
-- "ban " .. <the limit's field>, beside the limit's own: "first strikes
-- until" (docs/redis-state.md). Built on first use, as the algorithms are.

local BAN = lazy(function()
  local ban = {}

  -- The ban's words from the front of a spec, and the algorithm's spec
  -- after them; nil when the spec has no ban.
  function ban.split(spec)
    if string.sub(spec, 1, 4) ~= 'ban ' then return nil, spec end
    local after, within, duration, rest = string.match(spec, '^ban (%S+) (%S+) (%S+) (.+)$')
    if rest == nil then
      error('tollgate: bad ban spec: ' .. spec)
    end
    return {
      after = number_field(after, 'ban after'),
      within = number_field(within, 'ban within'),
      duration = number_field(duration, 'ban for'),
    }, rest
  end

  function ban.decode(text)
    if text == nil then
      return { first = B.ZERO, strikes = B.ZERO, ends = B.ZERO }
    end
    -- Format version 1, as every value (docs/redis-state.md).
    local first = string.byte(text, 1)
    if first == nil or first < 48 or first > 57 then
      error('tollgate: a ban state is not format version 1')
    end
    local w = words(text)
    if w[4] ~= nil then error('tollgate: bad ban state') end
    return {
      first = number_field(w[1], 'ban state'),
      strikes = number_field(w[2], 'ban state'),
      ends = number_field(w[3], 'ban state'),
    }
  end

  function ban.encode(st)
    return B.str(st.first) .. ' ' .. B.str(st.strikes) .. ' ' .. B.str(st.ends)
  end

  function ban.is_banned(st, now)
    return B.cmp(now, st.ends) < 0
  end

  -- Counts a strike at now against a key that is not banned; true when it
  -- starts a ban.
  function ban.strike(spec, st, now)
    local closed = B.cmp(now, B.sat64(B.add(st.first, spec.within))) >= 0
    if B.is_zero(st.strikes) or closed then
      st.first = now
      st.strikes = B.ZERO
    end
    st.strikes = B.add(st.strikes, B.ONE)
    if B.cmp(st.strikes, spec.after) < 0 then return false end
    st.first = B.ZERO
    st.strikes = B.ZERO
    st.ends = B.sat64(B.add(now, spec.duration))
    return true
  end

  -- The answer while banned, from the limit's own decision d at now,
  -- marked 's' when this request started the ban, 'b' when it was in force.
  function ban.refusal(st, now, d, mark)
    local left = until_ns(now, st.ends)
    d.allowed = false
    d.remaining = B.ZERO
    d.retry_after = left
    d.reset_after = B.max(d.reset_after, left)
    d.delay = B.ZERO
    d.lease = nil
    d.ban = mark
    return d
  end

  function ban.expires_at(spec, st)
    local window_end = B.ZERO
    if not B.is_zero(st.strikes) then
      window_end = B.sat64(B.add(st.first, spec.within))
    end
    return B.max(st.ends, window_end)
  end

  return ban
end)
