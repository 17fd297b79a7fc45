-- Renew moves the deadline of one group of an admission's charges: its
-- reservation record in the deadline index, when it has one, and its
-- leases. A record or lease gone (settled, swept, cancelled) or past its
-- deadline at now is left alone: the sweep settles it, and its place may be
-- another's already. A deadline never moves back.
--
-- KEYS: the deadline index, then the group's lease keys. ARGV: now (µs, ''
-- for TIME), the new deadline (µs), the lease member, the record ('' for
-- none).
--
-- Returns 1 when the group was open, 0 when it was left alone.
local now = clock(ARGV[1])
local deadline, member, rec = tonumber(ARGV[2]), ARGV[3], ARGV[4]
if rec ~= '' then
  local score = call('ZSCORE', KEYS[1], rec)
  if not score or tonumber(score) <= now then return 0 end
  if tonumber(score) < deadline then
    call('ZADD', KEYS[1], ARGV[2], rec)
    extend(KEYS[1], ms(deadline - now) + RECORD_GRACE)
  end
end
local open = rec ~= ''
for i = 2, #KEYS do
  local score = call('ZSCORE', KEYS[i], member)
  if score and tonumber(score) > now then
    open = true
    if tonumber(score) < deadline then
      call('ZADD', KEYS[i], ARGV[2], member)
      extend(KEYS[i], ms(deadline - now))
    end
  end
end
return open and 1 or 0
