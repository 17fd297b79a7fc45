-- Ops applies a batch of operations of one hash slot in order, each as if
-- it ran alone: admissions (check every charge, apply all or none), checks
-- and peeks (apply nothing), settlements (apply once). Batching lets the
-- operations that concurrent callers send meanwhile share one script call,
-- and the state of a counter is read once and written once per batch.
--
-- ARGV: now (µs, '' for TIME), the number of operations, then per
-- operation: its offset in KEYS, type (1 admit, 2 check, 3 peek, 4 settle),
-- lease member, deadline (µs), reservation record ('' for none), the local
-- index of the deadline index key (0 for none), the number of charges, then
-- 8 values per charge: local key index, kind (1 rate, 2 budget,
-- 3 concurrency), amount, limit (settle: actual, for a rate the delta),
-- shadow (1 or 0), and three parameters: for a rate burst, W, L; for a
-- budget the period's end (µs) and the expiry policy (1 release).
--
-- Returns now, then per operation: for an admission, check or peek,
-- admitted (1 or 0) and 5 values per charge (allowed, remaining, used,
-- retry after in µs or -1 for never, reset in µs or 0 for none); for a
-- settlement, 1 when applied and 0 when the record was already settled.
local now = clock(ARGV[1])
local now_s = fmt(now)
local rates, budgets, leases, dues = {}, {}, {}, {}

local function rate_state(key, L)
  local s = rates[key]
  if not s then
    local tat, frac = rate_load(key, L, now)
    s = {tat = tat, frac = frac, L = L}
    rates[key] = s
  elseif s.L ~= L then
    if s.frac > 0 then s.tat = s.tat + 1 end
    s.frac, s.L = 0, L
  end
  return s
end

-- rate_adjust moves a bucket by delta units after settlement: a refund gives
-- room back (never more than a full bucket), an overrun draws it into debt
-- bounded by one burst. |delta| never exceeds 2*burst+1.
local function rate_adjust(s, delta, burst, W, L)
  if delta == 0 then return end
  local tat, frac = s.tat, s.frac
  if tat < now then tat, frac = now, 0 end
  if delta > 0 then
    local lim = 2 * burst * W
    local q, r = divmod(delta * W + frac, L)
    tat, frac = tat + q, r
    if drawn(tat, frac, L, now) > lim then
      q, r = divmod(lim, L)
      tat, frac = now + q, r
    end
  else
    local q, r = divmod(-delta * W, L)
    tat, frac = tat - q, frac - r
    if frac < 0 then tat, frac = tat - 1, frac + L end
    if tat < now then tat, frac = now, 0 end
  end
  s.tat, s.frac, s.dirty = tat, frac, true
end

local function budget_state(key)
  local s = budgets[key]
  if not s then
    local v = redis.call('HMGET', key, 'u', 'r')
    s = {u = tonumber(v[1]) or 0, r = tonumber(v[2]) or 0, pe = 0}
    budgets[key] = s
  end
  return s
end

-- lease_state counts the live leases of a key, dropping expired ones, and
-- knows the earliest expiry.
local function lease_state(key)
  local s = leases[key]
  if not s then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if first[2] and tonumber(first[2]) <= now then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', now_s)
      first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    end
    s = {held = redis.call('ZCARD', key), earliest = tonumber(first[2] or '0'), max = 0}
    leases[key] = s
  elseif not s.earliest then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    s.earliest = tonumber(first[2] or '0')
  end
  return s
end

local out = {now}
local p = 3
for o = 1, tonumber(ARGV[2]) do
  local off, typ = tonumber(ARGV[p]), tonumber(ARGV[p + 1])
  local member, deadline, rec = ARGV[p + 2], tonumber(ARGV[p + 3]), ARGV[p + 4]
  local due_idx, n = tonumber(ARGV[p + 5]), tonumber(ARGV[p + 6])
  local due = due_idx > 0 and KEYS[off + due_idx] or nil
  local c0 = p + 7
  p = c0 + 8 * n
  if typ == 4 then
    local applied = 1
    if rec ~= '' and redis.call('ZREM', due, rec) == 0 then applied = 0 end
    if applied == 1 then
      for i = 0, n - 1 do
        local a = c0 + 8 * i
        local key, kind, amount = KEYS[off + tonumber(ARGV[a])], ARGV[a + 1], tonumber(ARGV[a + 2])
        if kind == '1' then
          local L = tonumber(ARGV[a + 7])
          rate_adjust(rate_state(key, L), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), L)
        elseif kind == '2' then
          local s = budget_state(key)
          s.r = math.max(0, s.r - amount)
          s.u = s.u + tonumber(ARGV[a + 3])
          s.pe, s.dirty = math.max(s.pe, tonumber(ARGV[a + 5])), true
        elseif redis.call('ZREM', key, member) == 1 then
          local s = leases[key]
          if s then
            s.held = s.held - 1
            if s.earliest == deadline then s.earliest = nil end
          end
        end
      end
    end
    out[o + 1] = {applied}
  else
    local res, admit, plans = {0}, true, {}
    for i = 0, n - 1 do
      local a = c0 + 8 * i
      local key, kind = KEYS[off + tonumber(ARGV[a])], ARGV[a + 1]
      local amount, limit, shadow = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), ARGV[a + 4] == '1'
      local allowed, remaining, used, retry, reset = false, 0, 0, 0, 0
      if kind == '1' then
        local burst, W, L = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
        local s = rate_state(key, L)
        local tat, frac = s.tat, s.frac
        if tat < now then tat, frac = now, 0 end
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
          plans[i] = {nt, nf}
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
      elseif kind == '2' then
        local s = budget_state(key)
        local in_use = s.u + s.r
        allowed = in_use + amount <= limit and (amount > 0 or in_use < limit)
        if allowed then in_use = in_use + amount end
        used, remaining = in_use, math.max(0, limit - in_use)
      else
        local s = lease_state(key)
        local held = s.held
        allowed = held < limit
        if allowed and typ ~= 3 then held = held + 1 end
        used, remaining = held, math.max(0, limit - held)
        reset = s.earliest
        if not allowed and reset > 0 then retry = reset - now end
      end
      if not allowed and not shadow then admit = false end
      local k = 1 + 5 * i
      res[k + 1], res[k + 2], res[k + 3], res[k + 4], res[k + 5] = allowed and 1 or 0, remaining, used, retry, reset
    end
    if admit and typ == 1 then
      res[1] = 1
      for i = 0, n - 1 do
        local a = c0 + 8 * i
        local key, kind, amount = KEYS[off + tonumber(ARGV[a])], ARGV[a + 1], tonumber(ARGV[a + 2])
        if kind == '1' then
          local burst, W, L = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
          local s = rates[key]
          if plans[i] then
            s.tat, s.frac, s.dirty = plans[i][1], plans[i][2], true
          else
            -- A shadow charge over its limit is drawn like an overrun.
            rate_adjust(s, math.min(amount, 2 * burst + 1), burst, W, L)
          end
        elseif kind == '2' then
          local s = budgets[key]
          s.r, s.pe, s.dirty = s.r + amount, math.max(s.pe, tonumber(ARGV[a + 5])), true
        else
          redis.call('ZADD', key, fmt(deadline), member)
          local s = leases[key]
          s.held, s.max = s.held + 1, math.max(s.max, deadline)
          if s.earliest == 0 or deadline < s.earliest then s.earliest = deadline end
        end
      end
      if rec ~= '' then
        redis.call('ZADD', due, fmt(deadline), rec)
        dues[due] = math.max(dues[due] or 0, ms(deadline - now) + RECORD_GRACE)
      end
    elseif typ == 1 then
      res[1] = 0
    end
    out[o + 1] = res
  end
end

-- Write back every counter changed, each with its lifetime.
for key, s in pairs(rates) do
  if s.dirty then rate_save(key, s.tat, s.frac, s.L, now) end
end
for key, s in pairs(budgets) do
  if s.dirty then
    redis.call('HSET', key, 'u', fmt(s.u), 'r', fmt(s.r))
    redis.call('PEXPIRE', key, fmt(ms(s.pe - now) + GRACE))
  end
end
for key, s in pairs(leases) do
  if s.max > 0 then extend(key, ms(s.max - now)) end
end
for key, ttl in pairs(dues) do extend(key, ttl) end
return out
