-- rescue: apply the fates rules.rescue_fate decided, and forget dead workers.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now (as rescue_scan returned it)    ARGV[2] worker_stale_s (as rescue_scan's)
-- ARGV[3]  d, the number of dead workers; ARGV[4 .. 3+d] their ids
-- then per fate, 8 values: run id, fence, state (queued or dead), recoveries, run_at,
--          finished_at, error, event kind; NIL for a missing value
-- Returns  the rescued runs' hashes
--
-- A fate is applied only while the run is still running under the fence that was
-- judged stuck: an owner that finished meanwhile wins, and a second rescuer changes
-- nothing. A takeover keeps the attempt (rules: the attempt a run is on): the next claim continues it.
-- A worker judged dead is judged again here (worker_death), where nothing can change
-- under the decision: one that came back since the scan (its liveness key taken again)
-- keeps its registration, and its runs whose lease still holds.
local now = now_of(ARGV[1])
local stale_before = now - tonumber(ARGV[2])
local dead_count = tonumber(ARGV[3])
local revived = {}
for i = 4, 3 + dead_count do
  local worker = ARGV[i]
  if worker_death(worker, stale_before) then
    redis.call('HDEL', P .. 'workers', worker)
    redis.call('HDEL', P .. 'beats', worker)
    redis.call('DEL', P .. 'alive:' .. worker)
  else
    revived[worker] = true
  end
end
local out = {}
for i = 4 + dead_count, #ARGV, 8 do
  local id, fence, state = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local run = load(id)
  local held = run and run.owner and revived[run.owner]
    and run.lease_expires_at and tonumber(run.lease_expires_at) >= now
  if owns(run, fence) and not held then
    local key = run_key(id)
    disown(id, run)
    move(id, run, state)
    redis.call('HSET', key, 'recoveries', ARGV[i + 3], 'run_at', ARGV[i + 4])
    local finished_at, err = opt(ARGV[i + 5]), opt(ARGV[i + 6])
    if finished_at then redis.call('HSET', key, 'finished_at', finished_at) else redis.call('HDEL', key, 'finished_at') end
    if err then redis.call('HSET', key, 'error', err) else redis.call('HDEL', key, 'error') end
    run.run_at = ARGV[i + 4]
    if state == 'queued' and run.pause_requested == '1' then
      -- Asked to pause, its owner died before the step boundary it would have stopped at.
      redis.call('HSET', key, 'run_at', PAUSED_AT, 'waiting', PAUSED)
    elseif state == 'queued' then enqueue(id, run) else ended(id, run, now) end
    redis.call('HDEL', key, 'pause_requested')
    log(id, ARGV[i + 7], string.format('{"recoveries": %d}', tonumber(ARGV[i + 3])), now)
    out[#out + 1] = redis.call('HGETALL', key)
  end
end
publish()
return out
