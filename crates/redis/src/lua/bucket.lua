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

  if RECORDING then
    -- Whole tokens needed to make up `units`, rounded up, saturating at
    -- u64::MAX: the usage a record reports.
    function BUCKET.tokens_for(L, units)
      return B.sat64(B.div_ceil(units, L.p))
    end

    -- bucket.rs MOST_UNITS (u128::MAX >> 2): the most units of debt or of
    -- queue a record leaves.
    local most
    function BUCKET.most_units()
      if most == nil then most = B.parse('85070591730234615865843651857942052863') end
      return most
    end
  end

  return BUCKET
end)
