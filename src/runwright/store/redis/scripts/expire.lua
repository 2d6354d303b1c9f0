-- expire: end `failed` every open run whose deadline has passed, whatever its worker.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  the error the runs end with (rules.deadline_error)
-- ARGV[3]  the `failed` event's data
-- Returns  the expired runs' hashes
--
-- deadlines is a sorted set of open runs by deadline_at, so a tick that finds nothing
-- costs one range read. A running run's owner finds its next fenced write refused.
local now = now_of(ARGV[1])
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'deadlines', '-inf', '(' .. num(now))) do
  local run = load(id)
  redis.call('ZREM', P .. 'deadlines', id)
  if run and (run.state == 'queued' or run.state == 'running') then
    if run.state == 'running' then disown(id, run) else dequeue(id, run) end
    move(id, run, 'failed')
    redis.call('HSET', run_key(id), 'finished_at', num(now), 'error', ARGV[2])
    ended(id, run, now)
    log(id, 'failed', ARGV[3], now)
    out[#out + 1] = redis.call('HGETALL', run_key(id))
  end
end
publish()
return out
