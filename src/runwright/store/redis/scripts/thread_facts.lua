-- thread_facts: what a list of threads shows of each thread (read only).
--
-- KEYS[1]  <prefix>ids
-- ARGV     thread identities (JSON [tenant, thread]), as the lists tlist* hold them
-- Returns  per thread, in order: {} when it is gone, else {created_at, deleted_at or '',
--          its runs kept, its open runs, its newest run's id or '', that run's state or '',
--          its number (the thread's incarnation)}
local out = {}
for i = 1, #ARGV do
  local no = redis.call('HGET', P .. 'threads', ARGV[i])
  if not no then
    out[i] = {}
  else
    local times = redis.call('HMGET', P .. 'thread:' .. no, 'created_at', 'deleted_at')
    local newest = redis.call('ZREVRANGE', P .. 'truns:' .. no, 0, 0)[1]
    local state = newest and redis.call('HGET', run_key(newest), 'state')
    out[i] = {times[1] or '', times[2] or '', redis.call('ZCARD', P .. 'truns:' .. no),
              redis.call('ZCARD', P .. 'topen:' .. no), newest or '', state or '', no}
  end
end
return out
