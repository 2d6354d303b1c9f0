-- retry: a dead or failed run back to queued with fresh attempts (rules.retry_drops).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  run id    ARGV[3] the state the decision was made on
-- ARGV[4]  the `requeued` event's data
-- ARGV[5..] journal positions to forget
-- Returns  {'stale'} if the run's state changed since, else {'ok', the run's hash}
local now = now_of(ARGV[1])
local id = ARGV[2]
local run = load(id)
if not run or run.state ~= ARGV[3] then return {'stale'} end
local key = run_key(id)
move(id, run, 'queued')
redis.call('HSET', key, 'attempt', 0, 'recoveries', 0, 'run_at', num(now))
redis.call('HDEL', key, 'result', 'error', 'finished_at', 'owner', 'lease_expires_at')
for i = 5, #ARGV do redis.call('HDEL', P .. 'steps:' .. id, ARGV[i]) end
run.run_at = num(now)
enqueue(id, run)
-- Open again: it holds its thread and its deadline counts again.
if run.thread_no then redis.call('ZADD', P .. 'topen:' .. run.thread_no, id, id) end
if run.deadline_at then redis.call('ZADD', P .. 'deadlines', run.deadline_at, id) end
log(id, 'requeued', ARGV[4], now)
publish()
return {'ok', redis.call('HGETALL', key)}
