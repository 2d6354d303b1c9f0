-- thread_probe: what a threaded submission's busy policy is decided on (read only).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  thread identity (JSON [tenant, thread])    ARGV[2] key identity (JSON [tenant, key])
-- Returns  {deleted (0/1), existing run's hash or {}, open run hash, open run hash, ...}
--          (open: queued or running, in id order)
local no = thread_no_of(ARGV[1], 0, false)
local deleted = 0
local open = {}
if no then
  if redis.call('HEXISTS', P .. 'thread:' .. no, 'deleted_at') == 1 then deleted = 1 end
  open = redis.call('ZRANGE', P .. 'topen:' .. no, 0, -1)
end
local existing = redis.call('HGET', P .. 'keys', ARGV[2])
local out = {deleted, existing and redis.call('HGETALL', run_key(existing)) or {}}
for _, id in ipairs(open) do out[#out + 1] = redis.call('HGETALL', run_key(id)) end
return out
