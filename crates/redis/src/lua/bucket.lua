-- Bucket arithmetic shared by token_bucket and leaky_bucket: a port of
-- tollgate-core's algorithm/bucket.rs (BucketMath). A rate of n per p ns,
-- both already divided by their gcd on the Rust side, refills n units per
-- nanosecond; one token (or queued request) is p units.
-- Spec prefix: "<name> n p burst".

local bucket_math = lazy(function()
  local BUCKET = {}

  -- n, p, burst and the capacity in units from a bucket spec's words.
  function BUCKET.parse(f)
    local L = {
      n = number_field(f[2], 'n'),
      p = number_field(f[3], 'p'),
      burst = number_field(f[4], 'burst'),
    }
    L.cap = B.mul(L.burst, L.p)
    return L
  end

  -- Units in `tokens` tokens.
  function BUCKET.units(L, tokens)
    return B.mul(tokens, L.p)
  end

  -- Units refilled (or drained) in `ns` nanoseconds.
  function BUCKET.refill(L, ns)
    return B.mul(ns, L.n)
  end

  -- Whole tokens in `units`, saturating at u64::MAX.
  function BUCKET.whole_tokens(L, units)
    return B.sat64(B.div_floor(units, L.p))
  end

  -- Nanoseconds needed to refill `units`, rounded up, saturating at u64::MAX.
  function BUCKET.nanos_for(L, units)
    return B.sat64(B.div_ceil(units, L.n))
  end

  return BUCKET
end)
