-- Sweep settles the reservations of one deadline index whose deadline is
-- not after now: leases are freed, budget charges charged their amount or
-- released per their expiry policy. A reservation record is a member of the
-- index; whoever removes it (this script or a settlement) settles it, so a
-- reservation is settled once however many replicas sweep at the same time.
--
-- KEYS: the deadline index. ARGV: now (µs, '' for TIME), the most records
-- to settle in one call, '1' to report what was settled.
--
-- Returns: reservations settled, budget charges charged, budget charges
-- released, records looked at, the records settled (when asked: per record
-- the key of each of its charges and what it was charged, 0 but for a
-- budget charged its amount), then the budget keys repaired (see
-- budget_load).
local now = clock(ARGV[1])
local report = ARGV[3] == '1'
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now), 'LIMIT', 0, tonumber(ARGV[2]))
local reservations, charged, released = 0, 0, 0
local settled = {}
for _, rec in ipairs(due) do
  if redis.call('ZREM', KEYS[1], rec) == 1 then
    local e = cmsgpack.unpack(rec)
    local member = e[1]
    reservations = reservations + e[2]
    local told = {}
    for j = 3, #e, 5 do
      local kind, key = e[j], e[j + 1]
      local paid = 0
      if kind == 2 then
        local amount = e[j + 2]
        if e[j + 3] == 1 then
          budget_settle(key, amount, 0, e[j + 4], now)
          released = released + 1
        else
          budget_settle(key, amount, amount, e[j + 4], now)
          charged = charged + 1
          paid = amount
        end
      else
        redis.call('ZREM', key, member)
      end
      if report then
        told[#told + 1] = key
        told[#told + 1] = fmt(paid)
      end
    end
    if report then
      settled[#settled + 1] = told
    end
  end
end
local out = {reservations, charged, released, #due, settled}
for _, key in ipairs(repaired) do out[#out + 1] = key end
return out
