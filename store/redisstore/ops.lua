-- Ops applies a batch of operations of one hash slot in order, each as if
-- it ran alone: admissions (check every charge, apply all or none), checks
-- and peeks (apply nothing), settlements (apply once). Batching lets the
-- operations that concurrent callers send meanwhile share one script call,
-- and the state of a counter is read once and written once per batch.
--
-- KEYS: every key of the batch, once. ARGV: now (µs, '' for TIME), the
-- number of operations, then each operation packed little-endian (so that no decimal number needs parsing): type i1 (1 admit,
-- 2 check, 3 peek, 4 settle), deadline i8 (µs) and the same in decimal
-- (i1 length, chars), the index in KEYS of the deadline index i2 (0 for
-- none), the number of charges i2, the lease member (i2 length, chars), the
-- reservation record (i4 length, bytes), then per charge: its key's index
-- in KEYS i2, kind i1 (1 rate, 2 budget, 3 concurrency), shadow i1, amount i8,
-- limit i8 (settle: actual, for a rate the delta) and three parameters i8:
-- for a rate burst, W, L; for a budget the period's end (µs).
--
-- Returns now, then per operation a packed result: for a settlement i1 (1
-- when applied, 0 when the record was already settled); otherwise admitted
-- i1, then per charge allowed i1, remaining i8, used i8, retry after i8 (µs,
-- -1 for never) and reset i8 (µs, 0 for none).
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
-- knows the earliest expiry (0 for none; nil once the earliest lease was
-- freed, until asked again). Leases admitted in this batch are in adds until
-- the batch ends; max is the latest expiry added.
local function lease_state(key)
  local s = leases[key]
  if not s then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if first[2] and tonumber(first[2]) <= now then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', now_s)
      first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    end
    s = {held = redis.call('ZCARD', key), earliest = tonumber(first[2] or '0'), max = 0, adds = {}}
    leases[key] = s
  elseif not s.earliest then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local earliest = tonumber(first[2] or '0')
    for j = 1, #s.adds, 2 do
      local d = tonumber(s.adds[j])
      if earliest == 0 or d < earliest then earliest = d end
    end
    s.earliest = earliest
  end
  return s
end

local out = {now}
local CHARGE = '<i2i1i1i8i8i8i8i8'
-- Per-charge scratch, reused by every operation.
local starts, res, nts, nfs = {}, {}, {}, {}
for o = 1, tonumber(ARGV[2]) do
  local blob = ARGV[o + 2]
  local typ, deadline, deadline_s, due_idx, n, member, rec, pos = struct.unpack('<i1i8i1c0i2i2i2c0i4c0', blob)
  local due = due_idx > 0 and KEYS[due_idx] or nil
  if typ == 4 then
    local applied = 1
    if rec ~= '' and redis.call('ZREM', due, rec) == 0 then applied = 0 end
    if applied == 1 then
      for _ = 1, n do
        local ki, kind, _, amount, actual, p1, p2, p3
        ki, kind, _, amount, actual, p1, p2, p3, pos = struct.unpack(CHARGE, blob, pos)
        local key = KEYS[ki]
        if kind == 1 then
          rate_adjust(rate_state(key, p3), actual, p1, p2, p3)
        elseif kind == 2 then
          local s = budget_state(key)
          s.r = math.max(0, s.r - amount)
          s.u = s.u + actual
          s.pe, s.dirty = math.max(s.pe, p1), true
        elseif redis.call('ZREM', key, member) == 1 then
          local s = leases[key]
          if s then
            s.held = s.held - 1
            if s.earliest == deadline then s.earliest = nil end
          end
        end
      end
    end
    out[o + 1] = applied == 1 and '\1' or '\0'
  else
    local admit = true
    for i = 1, n do
      starts[i] = pos
      local ki, kind, shadow, amount, limit, p1, p2, p3
      ki, kind, shadow, amount, limit, p1, p2, p3, pos = struct.unpack(CHARGE, blob, pos)
      local key = KEYS[ki]
      local allowed, remaining, used, retry, reset = false, 0, 0, 0, 0
      nts[i] = nil
      if kind == 1 then
        local burst, W, L = p1, p2, p3
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
          nts[i], nfs[i] = nt, nf
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
      if not allowed and shadow == 0 then admit = false end
      res[i] = struct.pack('<i1i8i8i8i8', allowed and 1 or 0, remaining, used, retry, reset)
    end
    if admit and typ == 1 then
      for i = 1, n do
        local ki, kind, _, amount, _, p1, p2, p3 = struct.unpack(CHARGE, blob, starts[i])
        local key = KEYS[ki]
        if kind == 1 then
          local s = rates[key]
          if nts[i] then
            s.tat, s.frac, s.dirty = nts[i], nfs[i], true
          else
            -- A shadow charge over its limit is drawn like an overrun.
            rate_adjust(s, math.min(amount, 2 * p1 + 1), p1, p2, p3)
          end
        elseif kind == 2 then
          local s = budgets[key]
          s.r, s.pe, s.dirty = s.r + amount, math.max(s.pe, p1), true
        else
          -- New leases are added once per batch (a lease is never settled
          -- in the batch that admits it: its caller waits for the admission).
          local s = leases[key]
          s.adds[#s.adds + 1], s.adds[#s.adds + 2] = deadline_s, member
          s.held, s.max = s.held + 1, math.max(s.max, deadline)
          if s.earliest == 0 or deadline < s.earliest then s.earliest = deadline end
        end
      end
      if rec ~= '' then
        redis.call('ZADD', due, deadline_s, rec)
        dues[due] = math.max(dues[due] or 0, ms(deadline - now) + RECORD_GRACE)
      end
      out[o + 1] = '\1' .. table.concat(res, '', 1, n)
    else
      out[o + 1] = '\0' .. table.concat(res, '', 1, n)
    end
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
  if #s.adds > 0 then redis.call('ZADD', key, unpack(s.adds)) end
  if s.max > 0 then extend(key, ms(s.max - now)) end
end
for key, ttl in pairs(dues) do extend(key, ttl) end
return out
