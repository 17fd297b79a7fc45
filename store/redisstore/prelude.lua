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
-- keeps 14 digits only. Both saturate at CEILING (2^53,
-- sluice.CounterCeiling): every sum is taken with min(.., CEILING), so a
-- stored figure is always an exact integer.
local GRACE = 3600000 -- a budget key outlives its period by an hour (ms)
local CEILING = 9007199254740992
-- The budget keys repaired by this script call, for the caller to log.
local repaired = {}

-- budget_load reads a budget's usage and reservations. A figure out of
-- bounds (negative, fractional, past CEILING: written before the counters
-- saturated) is repaired at once, keeping the key's lifetime, and the key
-- listed in repaired. Usage out of bounds can only be a sum that
-- overflowed, so the budget is taken as spent (CEILING) until its period
-- ends; reservations are clamped into bounds.
local function budget_load(key)
  local v = call('HMGET', key, 'u', 'r')
  local u, r = tonumber(v[1] or 0), tonumber(v[2] or 0)
  -- x % 1 == 0 is false for a fraction, an infinity and NaN.
  if u and r and u >= 0 and u <= CEILING and u % 1 == 0 and r >= 0 and r <= CEILING and r % 1 == 0 then
    return u, r
  end
  if not (u and u >= 0 and u <= CEILING and u % 1 == 0) then u = CEILING end
  if not (r and r >= 0) then r = 0 else r = math.min(floor(r), CEILING) end
  call('HSET', key, 'u', fmt(u), 'r', fmt(r))
  repaired[#repaired + 1] = key
  return u, r
end

local function budget_settle(key, amount, actual, period_end, now)
  local u, r = budget_load(key)
  call('HSET', key, 'u', fmt(math.min(u + actual, CEILING)), 'r', fmt(max(0, r - amount)))
  call('PEXPIRE', key, fmt(ms(period_end - now) + GRACE))
end

-- A reservation record outlives its deadline by a day, so that a sweep run
-- late still finds it.
local RECORD_GRACE = 86400000
