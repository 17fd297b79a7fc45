-- Sweep settles the reservations of one deadline index whose deadline is
-- not after now: leases are freed, budget charges charged their amount or
-- released per their expiry policy. A reservation record is a member of the
-- index; whoever removes it (this script or a settlement) settles it, so a
-- reservation is settled once however many replicas sweep at the same time.
--
-- KEYS: the deadline index. ARGV: now (µs, '' for TIME), the most records
-- to settle in one call.
--
-- Returns: reservations settled, budget charges charged, budget charges
-- released, records looked at, then the budget keys repaired (see
-- budget_load).
local now = clock(ARGV[1])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now), 'LIMIT', 0, tonumber(ARGV[2]))
local reservations, charged, released = 0, 0, 0
for _, rec in ipairs(due) do
  if redis.call('ZREM', KEYS[1], rec) == 1 then
    local e = cmsgpack.unpack(rec)
    local member = e[1]
    reservations = reservations + e[2]
    for j = 3, #e, 5 do
      local kind, key = e[j], e[j + 1]
      if kind == 2 then
        local amount = e[j + 2]
        if e[j + 3] == 1 then
          budget_settle(key, amount, 0, e[j + 4], now)
          released = released + 1
        else
          budget_settle(key, amount, amount, e[j + 4], now)
          charged = charged + 1
        end
      else
        redis.call('ZREM', key, member)
      end
    end
  end
end
local out = {reservations, charged, released, #due}
for _, key in ipairs(repaired) do out[#out + 1] = key end
return out
