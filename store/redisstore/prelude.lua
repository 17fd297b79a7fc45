-- Shared by every script of the store. Lua numbers are doubles: every value
-- handled here is an integer below 2^53 (redisstore checks the bounds before
-- a rule reaches a script), so + - * are exact and divmod corrects the one
-- rounding a double division may make. Library functions are locals: a
-- global is a table lookup at every use.
local call, floor, max, tonumber = redis.call, math.floor, math.max, tonumber
local format, match = string.format, string.match

local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- fmt writes an integer in full: Lua's own conversion keeps 14 digits, and
-- Redis refuses "-0". '%d' converts to a C long (64 bits), exact below 2^53
-- and much cheaper than '%.0f'.
local function fmt(x)
  return format('%d', x)
end

-- divmod returns floor(x/d) and x mod d exactly, for 0 <= x < 2^53.
local function divmod(x, d)
  local q = floor(x / d)
  local r = x - q * d
  if r < 0 then q, r = q - 1, r + d elseif r >= d then q, r = q + 1, r - d end
  return q, r
end

-- ms returns a key lifetime in milliseconds covering us microseconds.
local function ms(us)
  local q, r = divmod(max(us, 0), 1000)
  if r > 0 then q = q + 1 end
  return q + 1
end

-- extend sets key's lifetime to at least ttl milliseconds (a key with no
-- lifetime reports -1 and gets one).
local function extend(key, ttl)
  if call('PTTL', key) < ttl then call('PEXPIRE', key, fmt(ttl)) end
end

-- A rate bucket is stored as "tat:frac:L": the theoretical arrival time of
-- the next unit in Unix microseconds plus frac/L of a microsecond, the
-- refill being W microseconds per L units (the rule's window and limit
-- divided by their greatest common divisor). A missing key is a full bucket.
local function rate_load(key, L, now)
  local v = call('GET', key)
  if not v then return now, 0 end
  local t, f, l = match(v, '^(%d+):(%d+):(%d+)$')
  local tat, frac = tonumber(t), tonumber(f)
  if tonumber(l) ~= L and frac > 0 then
    -- The limit changed under this bucket: round up to the next microsecond.
    tat, frac = tat + 1, 0
  end
  if tat < now then return now, 0 end
  return tat, frac
end

-- rate_save stores a bucket; it lives until it is full again.
local function rate_save(key, tat, frac, L, now)
  if tat < now or (tat == now and frac == 0) then
    call('DEL', key)
    return
  end
  call('SET', key, format('%d:%d:%d', tat, frac, L), 'PX', fmt(ms(tat - now)))
end

-- drawn is how far (tat, frac) is ahead of now, in microseconds times L.
local function drawn(tat, frac, L, now)
  if tat < now then return 0 end
  return (tat - now) * L + frac
end

-- A budget is a hash: u is the settled usage, r the open reservations.
-- Numbers given to redis.call are formatted with fmt: Lua's own conversion
-- keeps 14 digits only. actual may be a string (an argument, exact to 2^63).
local GRACE = 3600000 -- a budget key outlives its period by an hour (ms)

local function budget_settle(key, amount, actual, period_end, now)
  if call('HINCRBY', key, 'r', fmt(-amount)) < 0 then call('HSET', key, 'r', '0') end
  if type(actual) == 'number' then actual = fmt(actual) end
  if actual ~= '0' then call('HINCRBY', key, 'u', actual) end
  call('PEXPIRE', key, fmt(ms(period_end - now) + GRACE))
end

-- A reservation record outlives its deadline by a day, so that a sweep run
-- late still finds it.
local RECORD_GRACE = 86400000
