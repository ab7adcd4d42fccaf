-- The minimal GCRA script that scripts/bench-redis and scripts/profile-redis
-- measure tollgate's Lua against (the usual one, of our own): KEYS[1] the
-- key; ARGV the emission interval and the burst tolerance in µs, and the
-- cost. The theoretical arrival time is stored as a decimal number of µs.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
  tat = now
end
local new_tat = tat + interval * tonumber(ARGV[3])
local allow_at = new_tat - tolerance
if allow_at > now then
  return {0, math.ceil(allow_at - now)}
end
local ttl = math.max(1, math.ceil((new_tat - now) / 1000))
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', ttl)
return {1, 0}
