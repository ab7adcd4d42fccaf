-- Exact non-negative integers of any size, for Redis scripts.
--
-- Lua 5.1 (the interpreter inside Redis) has only doubles, exact up to 2^53,
-- while tollgate's algorithms work in nanoseconds since the epoch (about
-- 2^61) scaled by rates (up to 2^128). A number here is an array of base
-- 10^7 limbs, least significant first, with no leading zero limbs (zero is
-- the empty array). A limb product is below 10^14 and a limb sum with its
-- carry stays far below 2^53, so every step is exact. Base 10^7 also makes
-- the decimal strings that cross the script boundary cheap to read and write.

local BASE = 10000000
local B = {}

local function trim(a)
  local n = #a
  while n > 0 and a[n] == 0 do
    a[n] = nil
    n = n - 1
  end
  return a
end

-- A decimal string of digits; nil when it is not one.
function B.parse(s)
  if type(s) ~= 'string' or not string.find(s, '^%d+$') then
    return nil
  end
  local a = {}
  local i = #s
  while i >= 1 do
    local j = i - 6
    if j < 1 then j = 1 end
    a[#a + 1] = tonumber(string.sub(s, j, i))
    i = j - 1
  end
  return trim(a)
end

-- An exact integer 0 <= x < 2^53.
function B.num(x)
  local a = {}
  while x > 0 do
    local r = x % BASE
    a[#a + 1] = r
    x = (x - r) / BASE
  end
  return a
end

function B.str(a)
  local n = #a
  if n == 0 then return '0' end
  local parts = { string.format('%d', a[n]) }
  for i = n - 1, 1, -1 do
    parts[#parts + 1] = string.format('%07d', a[i])
  end
  return table.concat(parts)
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
  local r, carry = {}, 0
  local n = math.max(#a, #b)
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
  if carry > 0 then r[n + 1] = carry end
  return r
end

-- a - b, or zero when b > a.
function B.sub(a, b)
  if B.cmp(a, b) <= 0 then return {} end
  local r, borrow = {}, 0
  for i = 1, #a do
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

function B.mul(a, b)
  if #a == 0 or #b == 0 then return {} end
  local r = {}
  for i = 1, #a + #b do r[i] = 0 end
  for i = 1, #a do
    local carry, ai = 0, a[i]
    for j = 1, #b do
      local t = r[i + j - 1] + ai * b[j] + carry
      carry = math.floor(t / BASE)
      r[i + j - 1] = t - carry * BASE
    end
    local k = i + #b
    while carry > 0 do
      local t = r[k] + carry
      carry = math.floor(t / BASE)
      r[k] = t - carry * BASE
      k = k + 1
    end
  end
  return trim(r)
end

-- a * k for an exact integer 0 <= k < BASE.
local function mul_limb(a, k)
  if k == 0 then return {} end
  local r, carry = {}, 0
  for i = 1, #a do
    local t = a[i] * k + carry
    carry = math.floor(t / BASE)
    r[i] = t - carry * BASE
  end
  if carry > 0 then r[#a + 1] = carry end
  return r
end

-- Quotient and remainder of a / b (b > 0).
function B.divmod(a, b)
  if #b == 0 then error('tollgate: division by zero') end
  if B.cmp(a, b) < 0 then return {}, a end
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
      digit = math.floor(B.approx(r) / approx_b)
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
  if #r > 0 then q = B.add(q, { 1 }) end
  return q
end

B.ZERO = {}
B.ONE = { 1 }
B.U64_MAX = B.parse('18446744073709551615')
B.MILLION = B.num(1000000)
B.BILLION = B.num(1000000000)

-- a, saturated at u64::MAX (the Rust side's integers).
function B.sat64(a)
  return B.min(a, B.U64_MAX)
end
