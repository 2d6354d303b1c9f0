-- retry: a dead or failed run back to queued with fresh attempts (rules.retry_drops).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  run id    ARGV[3] the state the decision was made on
-- ARGV[4]  the `retried` event's data
-- ARGV[5]  the identity of the run's thread (JSON [tenant, thread]; '' for none)
-- ARGV[6]  the fence the decision was made on
-- ARGV[7]  the states a manual retry takes (rules.RETRYABLE, comma-separated)
-- ARGV[8..] journal positions to forget
-- Returns  {'stale'} if the run's state or fence changed since, or its thread no longer
--          stands (the caller reads again: rules.check_retryable and
--          rules.check_retry_on_thread refuse), else {'ok', the run's hash}
local now = now_of(ARGV[1])
local id = ARGV[2]
local run = load(id)
if not run or run.state ~= ARGV[3] or tostring(run.fence) ~= ARGV[6] then return {'stale'} end
-- Checked here, where the write happens, not only by the caller that read the run: a
-- running run is never retried (its live claim would be superseded, its step run twice).
local retryable = false
for state in string.gmatch(ARGV[7], '[^,]+') do
  if run.state == state then retryable = true end
end
if not retryable then return {'stale'} end
-- A run of a thread re-opens on its own thread only: the name still names the run's
-- number, and that thread is not deleted (a delete or a reclaim since the decision).
if run.thread_no and (redis.call('HGET', P .. 'threads', ARGV[5]) ~= run.thread_no
    or redis.call('HEXISTS', P .. 'thread:' .. run.thread_no, 'deleted_at') == 1) then
  return {'stale'}
end
local key = run_key(id)
move(id, run, 'queued')
redis.call('HSET', key, 'attempt', 0, 'recoveries', 0, 'run_at', num(now))
redis.call('HDEL', key, 'result', 'error', 'finished_at', 'owner', 'lease_expires_at', 'pause_requested')
-- The journal is made whole again (steps_old back into steps), the positions dropped,
-- and the last snapshot that remains, if any, archives what precedes it again.
local steps, old = P .. 'steps:' .. id, P .. 'steps_old:' .. id
if redis.call('EXISTS', old) == 1 then
  local flat = redis.call('HGETALL', old)
  for j = 1, #flat, 2 do redis.call('HSET', steps, flat[j], flat[j + 1]) end
  redis.call('DEL', old)
end
redis.call('HDEL', key, 'snapshot_at')
for i = 8, #ARGV do redis.call('HDEL', steps, ARGV[i]) end
local last = -1
local flat = redis.call('HGETALL', steps)
for j = 1, #flat, 2 do
  local position = tonumber(flat[j])
  if position > last and is_snapshot(flat[j + 1]) then last = position end
end
if last >= 0 then archive_before(id, last) end
run.run_at = num(now)
enqueue(id, run)
-- Open again: it holds its thread and its deadline counts again.
if run.thread_no then redis.call('ZADD', P .. 'topen:' .. run.thread_no, run.turn or id, id) end
if run.deadline_at then redis.call('ZADD', P .. 'deadlines', run.deadline_at, id) end
log(id, 'retried', ARGV[4], now)
publish()
return {'ok', redis.call('HGETALL', key)}
