-- pause: apply what rules.plan_pause or rules.plan_resume decided, while the run is still
-- as it was when it was decided on.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  run id    ARGV[3] the action (rules.PauseAction)
-- ARGV[4]  the event's data
-- Returns  {'stale'} if the run is no longer in a state the action applies to (the
--          caller decides again), else {'ok', the run's hash}
local now = now_of(ARGV[1])
local id, action, data = ARGV[2], ARGV[3], ARGV[4]
local run = load(id)
if not run then return {'stale'} end
local key = run_key(id)
local paused = run.state == 'queued' and run.waiting == PAUSED
local asked = run.state == 'running' and run.pause_requested == '1'
if action == 'hold' then
  -- Queued: out of its due set, held at PAUSED_AT, its due time kept for a resume.
  if run.state ~= 'queued' or paused then return {'stale'} end
  dequeue(id, run)
  redis.call('HSET', key, 'held_run_at', run.run_at, 'run_at', PAUSED_AT, 'waiting', PAUSED)
  log(id, 'paused', data, now)
elseif action == 'request' then
  -- Running: its worker's watcher reads the request and stops it at its next step boundary.
  if run.state ~= 'running' or asked then return {'stale'} end
  redis.call('HSET', key, 'pause_requested', '1')
  log(id, 'pause_requested', data, now)
  cancel_ids[#cancel_ids + 1] = id
elseif action == 'release' then
  if not paused then return {'stale'} end
  -- rules.resumed_run_at: now for a run that started (it replays, and waits again for
  -- what is still due); its submitted time for one that never did.
  local run_at = num(now)
  if not run.started_at and run.held_run_at then run_at = num(math.max(tonumber(run.held_run_at), now)) end
  run.run_at = run_at
  redis.call('HSET', key, 'run_at', run_at, 'attempt', 0, 'recoveries', 0)
  redis.call('HDEL', key, 'waiting', 'held_run_at')
  enqueue(id, run)
  log(id, 'resumed', data, now)
elseif action == 'withdraw' then
  if not asked then return {'stale'} end
  redis.call('HDEL', key, 'pause_requested')
  log(id, 'resumed', data, now)
else
  return {'stale'}
end
publish()
return {'ok', redis.call('HGETALL', key)}
