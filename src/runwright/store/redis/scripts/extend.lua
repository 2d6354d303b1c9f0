-- extend: renew the leases of runs a worker still believes it owns.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  lease_s
-- ARGV[3]  worker id
-- ARGV[4..] pairs: run id, fence
-- Returns  flat pairs {run id, cancel_requested (0/1)} of the runs still owned; a run not
--          returned was superseded (its fence or owner changed): the worker abandons it
--
-- The lock token of BullMQ's extend: the fence, the state and the owner are compared.
local now = now_of(ARGV[1])
local lease = num(now + tonumber(ARGV[2]))
local worker = ARGV[3]
local out = {}
for i = 4, #ARGV, 2 do
  local id, fence = ARGV[i], ARGV[i + 1]
  local f = redis.call('HMGET', run_key(id), 'fence', 'state', 'owner', 'cancel_requested')
  if f[1] == fence and f[2] == 'running' and f[3] == worker then
    redis.call('HSET', run_key(id), 'lease_expires_at', lease)
    redis.call('ZADD', P .. 'running', lease, id)
    out[#out + 1] = tonumber(id)
    out[#out + 1] = tonumber(f[4])
  end
end
return out
