-- Exact non-negative integers of any size, for Redis scripts.
--
-- Lua 5.1 (the interpreter inside Redis) has only doubles, exact up to 2^53,
-- while tollgate's algorithms work in nanoseconds since the epoch (about
-- 2^61) scaled by rates (up to 2^128). A number here is an array of base
-- 10^7 limbs, least significant first, with no leading zero limbs (zero is
-- the empty array). A limb product is below 10^14 and a limb sum with its
-- carry stays far below 2^53, so every step is exact. Base 10^7 also makes
-- the decimal strings that cross the script boundary cheap to read and write.
-- A bigint is never changed once made (several names may share one).
--
-- Inside Redis a table, a closure or a new string costs a few hundred ns
-- (more with the array part of a table growing one slot at a time), much
-- more than the arithmetic: results are allocated once at their final size
-- (`zeros`), a division by a divisor up to about 9 * 10^14 (every one the
-- algorithms use in practice) is a short division over plain numbers, and
-- parse and str make as few strings and calls as they can.

local BASE = 10000000
local B = {}

local floor = math.floor
local format = string.format

-- An array of n zeros (n >= 1) whose array part has room for them from
-- the start: a table constructor sizes it once.
local function zeros(n)
  if n <= 2 then
    if n == 1 then return { 0 } end
    return { 0, 0 }
  elseif n <= 4 then
    if n == 3 then return { 0, 0, 0 } end
    return { 0, 0, 0, 0 }
  end
  local a = { 0, 0, 0, 0, 0, 0, 0, 0 }
  for i = n + 1, 8 do a[i] = nil end
  for i = 9, n do a[i] = 0 end
  return a
end

local function trim(a)
  local n = #a
  while n > 0 and a[n] == 0 do
    a[n] = nil
    n = n - 1
  end
  return a
end

-- An exact integer 0 <= x < 2^53.
function B.num(x)
  if x < BASE then
    if x == 0 then return {} end
    return { x }
  end
  local a = zeros(3)
  local n = 0
  while x > 0 do
    local r = x % BASE
    n = n + 1
    a[n] = r
    x = (x - r) / BASE
  end
  return trim(a)
end

-- A decimal string of digits; nil when it is not one.
function B.parse(s)
  if type(s) ~= 'string' or not string.find(s, '^%d+$') then
    return nil
  end
  local len = #s
  -- Up to 15 digits are exact as one double: split it by arithmetic.
  if len <= 15 then return B.num(tonumber(s)) end
  -- Otherwise 14 digits (two limbs) at a time, from the end.
  local a = zeros(2 * floor((len + 13) / 14))
  local n, i = 0, len
  while i >= 1 do
    local j = i - 13
    if j < 1 then j = 1 end
    local x = tonumber(string.sub(s, j, i))
    local low = x % BASE
    a[n + 1] = low
    a[n + 2] = (x - low) / BASE
    n = n + 2
    i = j - 1
  end
  return trim(a)
end

function B.str(a)
  local n = #a
  if n == 0 then return '0' end
  if n == 1 then return format('%d', a[1]) end
  if n == 2 then return format('%d%07d', a[2], a[1]) end
  if n == 3 then return format('%d%07d%07d', a[3], a[2], a[1]) end
  local parts = { format('%d', a[n]) }
  for i = n - 1, 1, -1 do
    parts[#parts + 1] = format('%07d', a[i])
  end
  return table.concat(parts)
end

-- high * 10^7 + low, for a bigint high and an exact integer 0 <= low < 10^7.
function B.shifted(high, low)
  local n = #high
  local a = zeros(n + 1)
  a[1] = low
  for i = 1, n do a[i + 1] = high[i] end
  return trim(a)
end

-- The value as a double (exact below 2^53, approximate above).
function B.approx(a)
  local x = 0
  for i = #a, 1, -1 do
    x = x * BASE + a[i]
  end
  return x
end

function B.is_zero(a)
  return #a == 0
end

-- -1, 0 or 1 as a is below, equal to or above b.
function B.cmp(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then
      return a[i] < b[i] and -1 or 1
    end
  end
  return 0
end

function B.max(a, b)
  return B.cmp(a, b) >= 0 and a or b
end

function B.min(a, b)
  return B.cmp(a, b) <= 0 and a or b
end

function B.add(a, b)
  local na, nb = #a, #b
  if nb == 0 then return a end
  if na == 0 then return b end
  local n = na
  if nb > n then n = nb end
  local r, carry = zeros(n + 1), 0
  for i = 1, n do
    local s = (a[i] or 0) + (b[i] or 0) + carry
    if s >= BASE then
      r[i] = s - BASE
      carry = 1
    else
      r[i] = s
      carry = 0
    end
  end
  r[n + 1] = carry
  return trim(r)
end

-- a - b, or zero when b > a.
function B.sub(a, b)
  if B.cmp(a, b) <= 0 then return {} end
  local n, nb = #a, #b
  if nb == 0 then return a end
  local r, borrow = zeros(n), 0
  for i = 1, n do
    local d = a[i] - (b[i] or 0) - borrow
    if d < 0 then
      r[i] = d + BASE
      borrow = 1
    else
      r[i] = d
      borrow = 0
    end
  end
  return trim(r)
end

-- a * k for an exact integer 0 <= k < BASE.
local function mul_limb(a, k)
  if k == 0 or #a == 0 then return {} end
  if k == 1 then return a end
  local n = #a
  local r, carry = zeros(n + 1), 0
  for i = 1, n do
    local t = a[i] * k + carry
    carry = floor(t / BASE)
    r[i] = t - carry * BASE
  end
  r[n + 1] = carry
  return trim(r)
end

function B.mul(a, b)
  local na, nb = #a, #b
  if na == 0 or nb == 0 then return {} end
  if nb == 1 then return mul_limb(a, b[1]) end
  if na == 1 then return mul_limb(b, a[1]) end
  local r = zeros(na + nb)
  for i = 1, na do
    local carry, ai = 0, a[i]
    for j = 1, nb do
      local t = r[i + j - 1] + ai * b[j] + carry
      carry = floor(t / BASE)
      r[i + j - 1] = t - carry * BASE
    end
    local k = i + nb
    while carry > 0 do
      local t = r[k] + carry
      carry = floor(t / BASE)
      r[k] = t - carry * BASE
      k = k + 1
    end
  end
  return trim(r)
end

-- The largest divisors of the short divisions below: every partial
-- remainder times the radix plus the next digit, (d - 1) * radix +
-- radix - 1, and every digit times d stay at most 2^53, so exact.
local SHORT_LIMBS = 900719925          -- radix BASE: floor(2^53 / 10^7)
local SHORT_DIGITS = 900719925474099   -- radix 10: floor(2^53 / 10)

-- floor(x / d) and x mod d for exact integers x, d with x < d * radix <=
-- 2^53. The rounded double quotient is the exact one or, when x / d lies
-- just below an integer, that integer: one correction step settles it.
local function divide(x, d)
  local q = floor(x / d)
  local r = x - q * d
  if r < 0 then
    return q - 1, r + d
  elseif r >= d then
    return q + 1, r - d
  end
  return q, r
end

-- Quotient and remainder of a / d for an exact integer 0 < d <=
-- SHORT_DIGITS: schoolbook division by one "digit", over whole limbs when
-- d <= SHORT_LIMBS and over decimal digits otherwise. No bigint but the
-- result is made.
local function short_divmod(a, d)
  local n = #a
  local q, r = zeros(n), 0
  if d <= SHORT_LIMBS then
    for i = n, 1, -1 do
      q[i], r = divide(r * BASE + a[i], d)
    end
  else
    for i = n, 1, -1 do
      local limb, digits, scale = a[i], 0, 1000000
      for _ = 1, 7 do
        local top = floor(limb / scale)
        limb = limb - top * scale
        local digit
        digit, r = divide(r * 10 + top, d)
        digits = digits * 10 + digit
        scale = scale / 10
      end
      q[i] = digits
    end
  end
  return trim(q), B.num(r)
end

-- Quotient and remainder of a / b (b > 0).
function B.divmod(a, b)
  local nb = #b
  if nb == 0 then error('tollgate: division by zero') end
  if B.cmp(a, b) < 0 then return {}, a end
  if nb == 1 and b[1] == 1 then return a, {} end
  -- Up to 2 limbs, or 3 below 10^15, b is exact as a double.
  if nb <= 2 or (nb == 3 and b[3] < 10) then
    local d = B.approx(b)
    if d <= SHORT_DIGITS then return short_divmod(a, d) end
  end
  local q, r = {}, {}
  local approx_b = B.approx(b)
  for i = #a, 1, -1 do
    -- r = r * BASE + a[i]
    table.insert(r, 1, a[i])
    trim(r)
    local digit = 0
    if B.cmp(r, b) >= 0 then
      -- r < b * BASE, so the digit is below BASE; the double estimate is off
      -- by at most one either way and the loops below correct it.
      digit = floor(B.approx(r) / approx_b)
      if digit >= BASE then digit = BASE - 1 end
      local t = mul_limb(b, digit)
      while B.cmp(t, r) > 0 do
        digit = digit - 1
        t = B.sub(t, b)
      end
      r = B.sub(r, t)
      while B.cmp(r, b) >= 0 do
        digit = digit + 1
        r = B.sub(r, b)
      end
    end
    q[i] = digit
  end
  return trim(q), r
end

-- floor(a / b)
function B.div_floor(a, b)
  local q = B.divmod(a, b)
  return q
end

-- ceil(a / b)
function B.div_ceil(a, b)
  local q, r = B.divmod(a, b)
  if #r > 0 then q = B.add(q, B.ONE) end
  return q
end

-- Constants as limbs, so that no call spends time parsing them.
B.ZERO = {}
B.ONE = { 1 }
B.U64_MAX = { 9551615, 4407370, 184467 } -- 18446744073709551615
B.MILLION = { 1000000 }
B.BILLION = { 0, 100 }

-- a, saturated at u64::MAX (the Rust side's integers).
function B.sat64(a)
  return B.min(a, B.U64_MAX)
end
