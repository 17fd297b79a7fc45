-- Ops applies a batch of operations of one hash slot in order, each as if
-- it ran alone: admissions (check every charge, apply all or none), checks
-- and peeks (apply nothing), settlements (apply once), cancellations (undo
-- an admission whose caller gave up, if it was applied). Batching lets the
-- operations that concurrent callers send meanwhile share one script call,
-- and the state of a counter is read once and written once per batch.
--
-- KEYS: every key of the batch, once. ARGV: now (µs, '' for TIME), each
-- operation's number of charges (two bytes little-endian per operation),
-- then the operations, one after the other in one string (an argument
-- each would cost Redis more), each packed so that one struct.unpack call reads it, every
-- number a little-endian double (all are integers below 2^53): type (1
-- admit, 2 check, 3 peek, 4 settle, 5 cancel), deadline (µs), the index in
-- KEYS of the deadline index (0 for none), the give-up time (server µs, 0
-- for none), the lease member (16 bytes), the deadline in decimal (length,
-- chars), then per charge seven numbers: its
-- key's index in KEYS, kind (1 rate, 2 budget, 3 concurrency; plus 4 for a
-- shadow charge), amount, limit (settle: actual, for a rate the delta) and
-- three parameters: for a rate burst, W, L; for a budget the period's end
-- (µs); then the reservation record (length, bytes).
--
-- Returns now, the server's own TIME (µs, now unless pinned), then per
-- operation a packed result: for a settlement or cancellation a byte (1
-- when applied, 0 when there was nothing to apply, 2 for a cancellation
-- that came before its give-up time); for an admission that came after its
-- give-up time the byte 2; otherwise admitted (a byte), then per charge
-- allowed (a byte) and three doubles: a rate's remaining units or a
-- budget's or concurrency cap's usage, the retry after (µs, -1 for never)
-- and the reset (µs, 0 for none).
--
-- The give-up time is when the admission's caller stops waiting, in the
-- server's clock. An admission that comes after it is refused, and its
-- cancellation applies only after it: the scripts run one at a time and
-- TIME goes forward, so either the admission ran first, and the
-- cancellation undoes it if it was applied, or it runs after and is
-- refused. Whether it was applied is known by its reservation record or,
-- without one, its first lease.
local unpack_op, pack, concat, min = struct.unpack, struct.pack, table.concat, math.min
local now = clock(ARGV[1])
local real = now
if ARGV[1] ~= '' then real = clock('') end
local rates, budgets, leases, dues = {}, {}, {}, {}
-- Leases freed by settlements whose key's state this batch has not read:
-- removed together, before the state is read or when the batch ends.
local frees = {}

local function free_leases(key)
  local f = frees[key]
  if f then
    frees[key] = nil
    call('ZREM', key, unpack(f))
  end
end

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
    local u, r = budget_load(key)
    s = {u = u, r = r, pe = 0}
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
    free_leases(key)
    local first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if first[2] and tonumber(first[2]) <= now then
      call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
      first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
    end
    local held = first[2] and call('ZCARD', key) or 0
    s = {held = held, earliest = tonumber(first[2] or '0'), max = 0, adds = {}}
    leases[key] = s
  elseif not s.earliest then
    local first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local earliest = tonumber(first[2] or '0')
    for j = 1, #s.adds, 2 do
      local d = tonumber(s.adds[j])
      if earliest == 0 or d < earliest then earliest = d end
    end
    s.earliest = earliest
  end
  return s
end

-- drop_lease frees a lease at once and tells whether it was held. A lease
-- expires at its batch's deadline or, renewed, later: when the earliest
-- expiry known is not before the deadline, it may be this lease's.
local function drop_lease(key, member, deadline)
  if call('ZREM', key, member) == 0 then return false end
  local s = leases[key]
  if s then
    s.held = s.held - 1
    if s.earliest and s.earliest >= deadline then s.earliest = nil end
  end
  return true
end

local out = {now, real}
local byte, rep = string.byte, string.rep
-- Formats of an operation, by number of charges, and of its result.
local formats, results = {}, {}
local HEAD, CHARGES = '<ddddc16dc0', 'ddddddd'

-- parse returns the fields of the operation at pos in a table: type,
-- deadline, deadline index, give-up time, member, deadline in decimal,
-- then seven per charge, then the record and the position of the next
-- operation. One
-- struct.unpack call for the usual operation; past 24 charges, 24 at a time
-- (a call returns at most a few thousand values).
local function parse(blob, n, pos)
  if n <= 24 then
    local f = formats[n]
    if not f then
      f = HEAD .. rep(CHARGES, n) .. 'dc0'
      formats[n] = f
    end
    return {unpack_op(f, blob, pos)}
  end
  local v = {unpack_op(HEAD, blob, pos)}
  local pos = v[7]
  v[7] = nil
  local left, at = n, 6
  while left > 0 do
    local m = min(left, 24)
    local c = {unpack_op('<' .. rep(CHARGES, m), blob, pos)}
    for j = 1, 7 * m do v[at + j] = c[j] end
    at, pos, left = at + 7 * m, c[7 * m + 1], left - m
  end
  v[at + 1], v[at + 2] = unpack_op('<dc0', blob, pos)
  return v
end

local ns, ops, pos = {byte(ARGV[2], 1, -1)}, ARGV[3], 1
-- Per-charge scratch, reused by every operation: the new bucket positions
-- and the values of the result.
local nts, nfs, vals = {}, {}, {}
for o = 1, #ns / 2 do
  local n = ns[2 * o - 1] + 256 * ns[2 * o]
  local v = parse(ops, n, pos)
  pos = v[8 + 7 * n]
  local typ, deadline, give_up, member, deadline_s, rec = v[1], v[2], v[4], v[5], v[6], v[7 + 7 * n]
  local due = v[3] > 0 and KEYS[v[3]] or nil
  if typ == 5 and real <= give_up then
    -- Too early: the admission may still come before its give-up time.
    out[o + 2] = '\2'
  elseif typ >= 4 then
    local applied, gate = true, 0
    if rec ~= '' then
      applied = call('ZREM', due, rec) == 1
    elseif typ == 5 then
      -- No record: the admission was applied if its first lease is held.
      applied = false
      for b = 6, 7 * n - 1, 7 do
        if v[b + 2] == 3 then
          gate, applied = b, drop_lease(KEYS[v[b + 1]], member, deadline)
          break
        end
      end
    end
    if applied then
      for b = 6, 7 * n - 1, 7 do
        local key, kind = KEYS[v[b + 1]], v[b + 2]
        if b == gate then
          -- Freed above.
        elseif kind == 1 then
          local p3 = v[b + 7]
          local s = rates[key]
          if not s or s.L ~= p3 then s = rate_state(key, p3) end
          rate_adjust(s, v[b + 4], v[b + 5], v[b + 6], p3)
        elseif kind == 2 then
          local s = budget_state(key)
          s.r = max(0, s.r - v[b + 3])
          s.u = min(s.u + v[b + 4], CEILING)
          s.pe, s.dirty = max(s.pe, v[b + 5]), true
        else
          local s = leases[key]
          if not s then
            local f = frees[key]
            if f then f[#f + 1] = member else frees[key] = {member} end
          elseif call('ZREM', key, member) == 1 then
            s.held = s.held - 1
            -- A renewed lease expires after its deadline (see drop_lease).
            if s.earliest and s.earliest >= deadline then s.earliest = nil end
          end
        end
      end
    end
    out[o + 2] = applied and '\1' or '\0'
  elseif typ == 1 and give_up > 0 and real > give_up then
    -- Its caller has given up: nobody would settle it.
    out[o + 2] = '\2'
  else
    local admit = true
    local r = 1
    for i = 1, n do
      local b = 7 * i - 1
      local key, kind, amount = KEYS[v[b + 1]], v[b + 2], v[b + 3]
      local shadow = kind > 4
      if shadow then kind = kind - 4 end
      local allowed, figure, retry, reset = false, 0, 0, 0
      nts[i] = nil
      if kind == 1 then
        local burst, W, L = v[b + 5], v[b + 6], v[b + 7]
        local s = rates[key]
        if not s or s.L ~= L then s = rate_state(key, L) end
        local tat, frac = s.tat, s.frac
        if tat < now then tat, frac = now, 0 end
        local cap = burst * W
        -- level is how far the bucket is drawn, in microseconds times L.
        local level = (tat - now) * L + frac
        if amount <= 2 * burst then
          -- The new position: amount*W/L microseconds further, exactly
          -- (x % L may be off by one L in doubles; the quotient of an exact
          -- multiple is exact).
          local x = amount * W + frac
          local m = x % L
          if m < 0 then m = m + L elseif m >= L then m = m - L end
          local nt = tat + (x - m) / L
          local after = (nt - now) * L + m
          if after <= cap then
            allowed, level, reset = true, after, nt
            if m > 0 then reset = reset + 1 end
            nts[i], nfs[i] = nt, m
          else
            local y = after - cap
            m = y % L
            if m < 0 then m = m + L elseif m >= L then m = m - L end
            retry = (y - m) / L
            if m > 0 then retry = retry + 1 end
          end
        else
          retry = -1
        end
        if not allowed then
          reset = tat
          if frac > 0 then reset = reset + 1 end
        end
        if level <= cap then
          local y = cap - level
          local m = y % W
          if m < 0 then m = m + W elseif m >= W then m = m - W end
          figure = (y - m) / W
        end
      elseif kind == 2 then
        local limit = v[b + 4]
        local s = budget_state(key)
        local in_use = min(s.u + s.r, CEILING)
        allowed = in_use + amount <= limit and (amount > 0 or in_use < limit)
        if allowed then in_use = in_use + amount end
        figure = in_use
      else
        local s = leases[key] or lease_state(key)
        if not s.earliest then s = lease_state(key) end
        local held = s.held
        allowed = held < v[b + 4]
        if allowed and typ ~= 3 then held = held + 1 end
        figure = held
        reset = s.earliest
        if not allowed and reset > 0 then retry = reset - now end
      end
      if not allowed and not shadow then admit = false end
      vals[r + 1], vals[r + 2], vals[r + 3], vals[r + 4] = allowed and 1 or 0, figure, retry, reset
      r = r + 4
    end
    if admit and typ == 1 then
      for i = 1, n do
        local b = 7 * i - 1
        local key, kind = KEYS[v[b + 1]], v[b + 2]
        if kind > 4 then kind = kind - 4 end
        if kind == 1 then
          local s = rates[key]
          if nts[i] then
            s.tat, s.frac, s.dirty = nts[i], nfs[i], true
          else
            -- A shadow charge over its limit is drawn like an overrun.
            local p1 = v[b + 5]
            rate_adjust(s, min(v[b + 3], 2 * p1 + 1), p1, v[b + 6], v[b + 7])
          end
        elseif kind == 2 then
          local s = budgets[key]
          s.r, s.pe, s.dirty = min(s.r + v[b + 3], CEILING), max(s.pe, v[b + 5]), true
        else
          -- New leases are added once per batch (a lease is never settled
          -- in the batch that admits it: its caller waits for the admission).
          local s = leases[key]
          s.adds[#s.adds + 1], s.adds[#s.adds + 2] = deadline_s, member
          s.held, s.max = s.held + 1, max(s.max, deadline)
          if s.earliest == 0 or deadline < s.earliest then s.earliest = deadline end
        end
      end
      if rec ~= '' then
        call('ZADD', due, deadline_s, rec)
        dues[due] = max(dues[due] or 0, ms(deadline - now) + RECORD_GRACE)
      end
      vals[1] = 1
    else
      vals[1] = 0
    end
    if n <= 32 then
      local f = results[n]
      if not f then
        f = '<B' .. rep('Bddd', n)
        results[n] = f
      end
      out[o + 2] = pack(f, unpack(vals, 1, r))
    else
      -- Past what one call takes as arguments, a charge at a time.
      local parts = {pack('<B', vals[1])}
      for i = 1, n do
        local j = 4 * i - 2
        parts[i + 1] = pack('<Bddd', vals[j], vals[j + 1], vals[j + 2], vals[j + 3])
      end
      out[o + 2] = concat(parts)
    end
  end
end

-- Write back every counter changed, each with its lifetime.
for key, s in pairs(rates) do
  if s.dirty then rate_save(key, s.tat, s.frac, s.L, now) end
end
for key, s in pairs(budgets) do
  if s.dirty then
    call('HSET', key, 'u', fmt(s.u), 'r', fmt(s.r))
    call('PEXPIRE', key, fmt(ms(s.pe - now) + GRACE))
  end
end
for key in pairs(frees) do free_leases(key) end
for key, s in pairs(leases) do
  if #s.adds > 0 then call('ZADD', key, unpack(s.adds)) end
  if s.max > 0 then extend(key, ms(s.max - now)) end
end
for key, ttl in pairs(dues) do extend(key, ttl) end
-- The budget keys repaired, after the results.
for _, key in ipairs(repaired) do out[#out + 1] = key end
return out
