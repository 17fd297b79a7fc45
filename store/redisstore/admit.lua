-- Admit checks the charges of one group (keys in one hash slot) and, in
-- mode 0, applies all of them or none.
--
-- KEYS: one counter per charge, then the reservation record, then the
-- deadline index of the record's slot.
-- ARGV: mode (0 admit, 1 check only, 2 peek), now in Unix microseconds (''
-- for the server's TIME), the lease member, the deadline (µs), whether the
-- record counts as the batch's reservation in a sweep (1 or 0), then 7
-- values per charge: kind (1 rate, 2 budget, 3 concurrency), amount, limit,
-- shadow (1 or 0) and three parameters: for a rate burst, W, L; for a budget
-- the period's end (µs) and the expiry policy (1 release, 0 charge).
--
-- Returns: admitted (1 or 0), now, then 5 values per charge: allowed,
-- remaining, used, retry after (µs, -1 for never), reset (µs, 0 for none).
local mode = tonumber(ARGV[1])
local now = clock(ARGV[2])
local member = ARGV[3]
local deadline = tonumber(ARGV[4])
local n = #KEYS - 2
local out = {0, now}
local admit = true
local next_tat = {}
local indexed = false
local now_excl = '(' .. fmt(now)

for i = 1, n do
  local a = 5 + (i - 1) * 7
  local kind, amount, limit = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local shadow = ARGV[a + 4] == '1'
  local key = KEYS[i]
  local allowed, remaining, used, retry, reset = false, 0, 0, 0, 0
  if kind == 1 then
    local burst, W, L = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
    local tat, frac = rate_load(key, L, now)
    local cap = burst * W
    local before = drawn(tat, frac, L, now)
    local fits, after, nt, nf = amount <= 2 * burst
    if fits then
      local q, r = divmod(amount * W + frac, L)
      nt, nf = tat + q, r
      after = drawn(nt, nf, L, now)
    end
    local level = before
    if fits and after <= cap then
      allowed, level = true, after
      reset = nt
      if nf > 0 then reset = reset + 1 end
      next_tat[i] = {nt, nf}
    else
      reset = tat
      if frac > 0 then reset = reset + 1 end
      if fits then
        local q, r = divmod(after - cap, L)
        if r > 0 then q = q + 1 end
        retry = q
      else
        retry = -1
      end
    end
    if level <= cap then remaining = divmod(cap - level, W) end
    used = burst - remaining
  elseif kind == 2 then
    local v = redis.call('HMGET', key, 'u', 'r')
    local in_use = (tonumber(v[1]) or 0) + (tonumber(v[2]) or 0)
    allowed = in_use + amount <= limit and (amount > 0 or in_use < limit)
    if allowed and mode ~= 2 then in_use = in_use + amount end
    used = in_use
    remaining = math.max(0, limit - in_use)
    indexed = true
  else
    local held = redis.call('ZCOUNT', key, now_excl, '+inf')
    allowed = held < limit
    if allowed and mode ~= 2 then held = held + 1 end
    used = held
    remaining = math.max(0, limit - held)
    local first = redis.call('ZRANGEBYSCORE', key, now_excl, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if first[2] then
      reset = tonumber(first[2])
      if not allowed then retry = reset - now end
    end
    indexed = true
  end
  if not allowed and not shadow then admit = false end
  local o = 2 + (i - 1) * 5
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = allowed and 1 or 0, remaining, used, retry, reset
end

if not admit or mode ~= 0 then return out end
out[1] = 1

local record, record_ttl = {member, tonumber(ARGV[5])}, ms(deadline - now) + RECORD_GRACE
for i = 1, n do
  local a = 5 + (i - 1) * 7
  local kind, amount = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local key = KEYS[i]
  if kind == 1 then
    local burst, W, L = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
    if next_tat[i] then
      rate_save(key, next_tat[i][1], next_tat[i][2], L, now)
    else
      -- A shadow charge over its limit is drawn like an overrun.
      rate_adjust(key, math.min(amount, 2 * burst + 1), burst, W, L, now)
    end
  elseif kind == 2 then
    local period_end = tonumber(ARGV[a + 5])
    redis.call('HINCRBY', key, 'r', ARGV[a + 2])
    redis.call('PEXPIRE', key, fmt(ms(period_end - now) + GRACE))
    local m = #record
    record[m + 1], record[m + 2], record[m + 3], record[m + 4], record[m + 5] = 1, key, amount, tonumber(ARGV[a + 6]), period_end
  else
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
    redis.call('ZADD', key, fmt(deadline), member)
    extend(key, ms(deadline - now))
    local m = #record
    record[m + 1], record[m + 2], record[m + 3], record[m + 4], record[m + 5] = 2, key, 0, 0, 0
  end
end
if indexed then
  local rec, due = KEYS[n + 1], KEYS[n + 2]
  redis.call('SET', rec, cmsgpack.pack(record), 'PX', fmt(record_ttl))
  redis.call('ZADD', due, fmt(deadline), rec)
  extend(due, record_ttl)
end
return out
