-- Settle applies the Actual amounts of one group's charges, once: a group
-- with a reservation record is settled only by whoever deletes the record
-- (this script or the sweep).
--
-- KEYS: one counter per charge, then the reservation record, then the
-- deadline index of the record's slot.
-- ARGV: now (µs, '' for TIME), the lease member, whether the group has a
-- record (1 or 0), then 7 values per charge: kind, amount, actual (for a
-- rate the delta, clamped to one burst and one unit), and four parameters:
-- for a rate burst, W, L; for a budget the period's end (µs).
--
-- Returns 1 when applied, 0 when the group had already been settled.
local now = clock(ARGV[1])
local member = ARGV[2]
local n = #KEYS - 2
if ARGV[3] == '1' then
  if redis.call('DEL', KEYS[n + 1]) == 0 then return 0 end
  redis.call('ZREM', KEYS[n + 2], KEYS[n + 1])
end
for i = 1, n do
  local a = 3 + (i - 1) * 7
  local kind, amount = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local key = KEYS[i]
  if kind == 1 then
    rate_adjust(key, tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), now)
  elseif kind == 2 then
    budget_settle(key, amount, ARGV[a + 3], tonumber(ARGV[a + 4]), now)
  else
    redis.call('ZREM', key, member)
  end
end
return 1
