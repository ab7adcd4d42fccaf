-- Random operations on packed rows (src/lua/packed_rows.lua) checked
-- against a plain array of rows after every step: values, searches, and
-- the encode/decode round trip. Runs after bigint.lua, algorithms.lua and
-- packed_rows.lua; ARGV[1] is the seed, ARGV[2] the number of steps.
-- Returns 'ok', or raises an error naming the first difference.

local Packed = packed_rows()

local seed = tonumber(ARGV[1])
local function rand(n)
  -- Park-Miller: every product stays below 2^53.
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local function big(x)
  return B.num(x)
end

local START = B.parse('1763000000000000000')
-- Small rooms: widths overflow, and the table rebuilds, often.
local room = { big(5), big(50), big(0) }
local t = Packed.new(room)
local model = {}

local function fail(what)
  error('packed rows: ' .. what .. ' (seed ' .. ARGV[1] .. ')')
end

local function check(step)
  local n = #model
  if Packed.len(t) ~= n then fail('len at step ' .. step) end
  for i = 1, n do
    for c = 1, 3 do
      if B.cmp(Packed.get(t, i, c), model[i][c]) ~= 0 then
        fail(string.format('row %d col %d at step %d', i, c, step))
      end
    end
  end
  -- Column 1 never decreases: search it for values around the rows'.
  for _ = 1, 4 do
    local v
    if n > 0 and rand(4) > 0 then
      v = model[rand(n) + 1][1]
      if rand(2) == 0 then v = B.add(v, big(rand(3))) else v = B.sub(v, big(rand(3))) end
    else
      v = B.add(START, big(rand(100000)))
    end
    for _, above in ipairs({ false, true }) do
      local want = n + 1
      for i = 1, n do
        local order = B.cmp(model[i][1], v)
        if order > 0 or (order == 0 and not above) then
          want = i
          break
        end
      end
      if Packed.search(t, 1, v, above) ~= want then
        fail('search ' .. B.str(v) .. ' at step ' .. step)
      end
    end
  end
end

local function row(c1)
  return { c1, big(rand(1000) * rand(1000) * rand(1000)), big(rand(7)) }
end

local steps = tonumber(ARGV[2])
for step = 1, steps do
  local n = #model
  local op = rand(10)
  if op <= 2 or n == 0 then
    -- Append, sometimes far past the last value.
    local last = n > 0 and model[n][1] or START
    local gap = big(rand(4))
    if rand(3) == 0 then gap = big(rand(2000000000)) end
    -- Now and then wider than a 15-digit chunk.
    if rand(40) == 0 then gap = B.mul(big(rand(1000000)), big(1000000000000)) end
    local r = row(B.add(last, gap))
    table.insert(model, r)
    Packed.insert(t, n + 1, r)
  elseif op == 3 then
    -- Insert anywhere, keeping column 1 in order.
    local i = rand(n + 1) + 1
    local c1
    if i == 1 then
      c1 = B.sub(model[1][1], big(rand(3)))
    else
      c1 = model[i - 1][1]
    end
    local r = row(c1)
    table.insert(model, i, r)
    Packed.insert(t, i, r)
  elseif op <= 5 then
    -- Change a row, mostly the last one.
    local i = rand(2) == 0 and n or rand(n) + 1
    local r = row(model[i][1])
    model[i] = r
    Packed.set(t, i, r)
  elseif op == 6 then
    local i = rand(n) + 1
    table.remove(model, i)
    Packed.remove(t, i)
  elseif op == 7 then
    local count = rand(n + 1)
    for _ = 1, count do table.remove(model, 1) end
    Packed.drop_front(t, count)
  elseif op == 8 then
    t = Packed.decode(room, Packed.encode(t, 'x '), 3)
  else
    local text = 'a b ' .. Packed.encode(t, '')
    local w, pos = Packed.fields(text, 2)
    if w[1] ~= 'a' or w[2] ~= 'b' then fail('fields') end
    t = Packed.decode(room, text, pos)
  end
  check(step)
end
return 'ok'
