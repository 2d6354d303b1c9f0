-- move_runs: `runwright move` writes runs copied from another store (runwright.move).
--
-- KEYS[1]  <prefix>ids
-- ARGV     per run, two values: its identity (JSON [tenant, key]), its hash (a JSON
--          object of text values: the fields as this store keeps them, absent = NULL)
-- Returns  how many runs were written (a run whose hash exists already is skipped: a
--          resumed move writes its last batch again)
--
-- Each run is put where the scripts that brought it to its state would have put it: its
-- key, the list of runs, the counters, a queued run's due set (enqueue), an open run's
-- deadline, its parent's children, its original's forks, an ended run in the latency
-- sample. A run running at the seal was given back (no owner): it is in `running` with a
-- lease lapsed at once, so the next rescue takes it over and a worker resumes it from its
-- journal (the `recovered` event, as after a worker's death).
local written = 0
for i = 1, #ARGV, 2 do
  local ident, run = ARGV[i], cjson.decode(ARGV[i + 1])
  local id = run.id
  if redis.call('EXISTS', run_key(id)) == 0 then
    local fields = {}
    for name, value in pairs(run) do fields[#fields + 1] = name; fields[#fields + 1] = value end
    redis.call('HSET', run_key(id), unpack(fields))
    redis.call('HSET', P .. 'keys', ident, id)
    redis.call('ZADD', P .. 'runs', id, id)
    count(run, run.state, 1)
    local open = run.state == 'queued' or run.state == 'running'
    if run.state == 'queued' then
      if run.waiting ~= PAUSED then enqueue(id, run) end
    elseif run.state == 'running' then
      redis.call('ZADD', P .. 'running', 0, id)
      if run.limits then redis.call('HSET', P .. 'lheld', id, run.limits) end
    elseif run.finished_at then
      ended_now[#ended_now + 1] = run.finished_at
      ended_now[#ended_now + 1] = id
      if not last_ended_at or tonumber(run.finished_at) > last_ended_at then
        last_ended_at = tonumber(run.finished_at)
      end
    end
    if open and run.deadline_at then redis.call('ZADD', P .. 'deadlines', run.deadline_at, id) end
    if run.parent_id then redis.call('SADD', P .. 'children:' .. run.parent_id, id) end
    if run.forked_from then redis.call('SADD', P .. 'forks:' .. run.forked_from, id) end
    written = written + 1
  end
end
publish()
return written
