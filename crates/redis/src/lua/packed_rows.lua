-- Packed rows: a table of rows of k non-negative integers kept as ONE
-- string of fixed-width decimal fields, so that an operation reads the rows
-- it needs, or binary-searches a sorted column, without decoding the rest.
-- It holds the step table of stepped_window.lua (the marks of the core's
-- running_totals.rs) and the leases of concurrency.lua, where the Rust
-- state is a deque searched by binary search: a decision here parses a
-- few fields, not every row, and the state stays compact.
--
-- Column c stores v - base[c] zero-padded to width[c] digits. A value that
-- does not fit (below the base, or too wide) rebuilds the whole table with
-- each column's minimum as its base and a width for its range plus the
-- column's `room` (how far the caller expects values to move before the
-- next rebuild). Rebuilding is the only step that decodes every row, and
-- the room makes it rare (once per several windows or lease lifetimes).
--
-- Text form: "base1 width1 ... basek widthk body" (the body may be empty).
--
-- The rows are the characters skip+1..cut of `text` (the stored text as
-- read: decoding copies nothing) followed by `tail`. Dropping rows at the
-- front moves `skip`; changing, adding or removing rows near the end moves
-- them into the short `tail`; the body is copied once more only to encode.
--
-- Fields are compared as equal-width digit strings, in chunks of at most
-- 15 digits read with tonumber (exact below 2^53): Lua's string `<` would
-- follow the server's collation locale.

local packed_rows = lazy(function()
  local Packed = {}

  local CHUNK = 15

  -- -1, 0 or 1 comparing two digit strings of one length.
  local function cmp_digits(a, b)
    if a == b then return 0 end
    for i = 1, #a, CHUNK do
      local x = tonumber(string.sub(a, i, i + CHUNK - 1))
      local y = tonumber(string.sub(b, i, i + CHUNK - 1))
      if x ~= y then
        return x < y and -1 or 1
      end
    end
    return 0
  end

  local function layout(t)
    t.offset = {}
    local o = 0
    for c = 1, t.k do
      t.offset[c] = o
      o = o + t.width[c]
    end
    t.row = o
  end

  local function set_body(t, text)
    t.text, t.skip, t.cut, t.tail = text, 0, #text, ''
  end

  -- An empty table; room[c] (a bigint) is column c's room.
  function Packed.new(room)
    local t = { k = #room, room = room, base = {}, width = {} }
    for c = 1, t.k do
      t.base[c] = B.ZERO
      t.width[c] = 1
    end
    layout(t)
    set_body(t, '')
    return t
  end

  function Packed.len(t)
    return (t.cut - t.skip + #t.tail) / t.row
  end

  local function field(t, i, c)
    local p = (i - 1) * t.row + t.offset[c]
    local in_text = t.cut - t.skip
    if p < in_text then
      p = p + t.skip
      return string.sub(t.text, p + 1, p + t.width[c])
    end
    p = p - in_text
    return string.sub(t.tail, p + 1, p + t.width[c])
  end

  -- Row i's value in column c.
  function Packed.get(t, i, c)
    return B.add(t.base[c], B.parse(field(t, i, c)))
  end

  -- v as column c's field, or nil when it does not fit.
  local function pad(t, c, v)
    if B.cmp(v, t.base[c]) < 0 then return nil end
    local s = B.str(B.sub(v, t.base[c]))
    local w = t.width[c]
    if #s > w then return nil end
    return string.rep('0', w - #s) .. s
  end

  -- A row's text, or nil when a value does not fit.
  local function pack(t, values)
    local parts = {}
    for c = 1, t.k do
      local s = pad(t, c, values[c])
      if s == nil then return nil end
      parts[c] = s
    end
    return table.concat(parts)
  end

  -- Every row, decoded: an array of arrays of bigints.
  function Packed.rows(t)
    local rows = {}
    for i = 1, Packed.len(t) do
      local r = {}
      for c = 1, t.k do
        r[c] = Packed.get(t, i, c)
      end
      rows[i] = r
    end
    return rows
  end

  -- Replaces the content by `rows`, with fresh bases and widths.
  function Packed.assign(t, rows)
    for c = 1, t.k do
      local lo, hi = B.ZERO, B.ZERO
      for i, r in ipairs(rows) do
        if i == 1 then
          lo, hi = r[c], r[c]
        else
          lo, hi = B.min(lo, r[c]), B.max(hi, r[c])
        end
      end
      t.base[c] = lo
      t.width[c] = #B.str(B.add(B.sub(hi, lo), t.room[c]))
    end
    layout(t)
    local parts = {}
    for i, r in ipairs(rows) do
      parts[i] = pack(t, r)
    end
    set_body(t, table.concat(parts))
  end

  -- Moves the rows from i on (1 <= i <= len + 1) into the tail; returns
  -- the character index of row i in the tail.
  local function split(t, i)
    local p = (i - 1) * t.row
    local in_text = t.cut - t.skip
    if p < in_text then
      local cut = t.skip + p
      t.tail = string.sub(t.text, cut + 1, t.cut) .. t.tail
      t.cut = cut
      return 0
    end
    return p - in_text
  end

  -- Puts `values` at row i (1 <= i <= len + 1), moving the rows from i on.
  function Packed.insert(t, i, values)
    local s = pack(t, values)
    if s == nil then
      local rows = Packed.rows(t)
      table.insert(rows, i, values)
      Packed.assign(t, rows)
      return
    end
    local p = split(t, i)
    t.tail = string.sub(t.tail, 1, p) .. s .. string.sub(t.tail, p + 1)
  end

  -- Replaces row i by `values`.
  function Packed.set(t, i, values)
    local s = pack(t, values)
    if s == nil then
      local rows = Packed.rows(t)
      rows[i] = values
      Packed.assign(t, rows)
      return
    end
    local p = split(t, i)
    t.tail = string.sub(t.tail, 1, p) .. s .. string.sub(t.tail, p + t.row + 1)
  end

  function Packed.remove(t, i)
    local p = split(t, i)
    t.tail = string.sub(t.tail, 1, p) .. string.sub(t.tail, p + t.row + 1)
  end

  -- Forgets the first `count` rows.
  function Packed.drop_front(t, count)
    local d = count * t.row
    local in_text = t.cut - t.skip
    if d <= in_text then
      t.skip = t.skip + d
    else
      t.tail = string.sub(t.tail, d - in_text + 1)
      t.skip = t.cut
    end
  end

  -- The first row whose value in column c is at least v (above v when
  -- `above`), or len + 1; the column must never decrease.
  function Packed.search(t, c, v, above)
    local n = Packed.len(t)
    if B.cmp(v, t.base[c]) < 0 then return 1 end
    local key = pad(t, c, v)
    if key == nil then return n + 1 end
    local lo, hi = 1, n + 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local order = cmp_digits(field(t, mid, c), key)
      if order < 0 or (above and order == 0) then
        lo = mid + 1
      else
        hi = mid
      end
    end
    return lo
  end

  -- `prefix` followed by the table's text. One `..` of all the parts
  -- copies the body once (table.concat would copy it in pieces).
  function Packed.encode(t, prefix)
    local header = {}
    for c = 1, t.k do
      header[#header + 1] = B.str(t.base[c])
      header[#header + 1] = string.format('%d', t.width[c])
    end
    local body = ''
    if t.cut > t.skip then body = string.sub(t.text, t.skip + 1, t.cut) end
    return prefix .. table.concat(header, ' ') .. ' ' .. body .. t.tail
  end

  -- The first `count` words of `text` (separated by single spaces) and
  -- the index where the rest begins. Plain finds: a pattern would walk
  -- every character of a long body.
  function Packed.fields(text, count, pos)
    local w = {}
    pos = pos or 1
    for i = 1, count do
      local space = string.find(text, ' ', pos, true)
      if space == nil then
        w[i] = string.sub(text, pos)
        return w, #text + 1
      end
      w[i] = string.sub(text, pos, space - 1)
      pos = space + 1
    end
    return w, pos
  end

  -- The table Packed.encode wrote from index pos of text on.
  function Packed.decode(room, text, pos)
    local t = Packed.new(room)
    local w, body = Packed.fields(text, 2 * t.k, pos)
    for c = 1, t.k do
      t.base[c] = number_field(w[2 * c - 1], 'packed base')
      local width = tonumber(w[2 * c])
      if width == nil or width < 1 or width > 64 or width % 1 ~= 0 then
        error('tollgate: bad packed width: ' .. tostring(w[2 * c]))
      end
      t.width[c] = width
    end
    layout(t)
    t.text, t.skip, t.cut, t.tail = text, body - 1, #text, ''
    if (t.cut - t.skip) % t.row ~= 0 then
      error('tollgate: bad packed rows')
    end
    return t
  end

  return Packed
end)
