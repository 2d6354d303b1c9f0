-- run_reclaim: remove ended runs with their journal, log and questions (retention).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  the scan cursor to keep (the lowest run id the next pass looks at)
-- ARGV[2]  the reclaimed id ranges after this pass, JSON [[lo, hi], ...] (rules.merge_ranges)
-- ARGV[3]  now ('' = the server's clock)    ARGV[4] the age a run must have ended ago ('' = any)
-- then     per run: its id, "state:finished_at" as the decision read it, its key identity
-- Returns  {'stale'} when a run changed since the decision (the caller reads again),
--          else {'ok'}; {'young'} when a run ended less than the age ago by the server's
--          clock (TIME, read here: the plan's reading is not trusted to be the judge)
--
-- Nothing of a run is left in an index: its key, the runs list, the counters, its
-- parent's children, its thread's runs, the pending questions. Its thread's history is
-- the thread's.
local function seen(run) return run.state .. ':' .. (run.finished_at or '') end
local cut_off = ARGV[4] ~= '' and now_of(ARGV[3]) - tonumber(ARGV[4]) or nil
local runs = {}
for i = 5, #ARGV, 3 do
  local run = load(ARGV[i])
  if not run or seen(run) ~= ARGV[i + 1] then return {'stale'} end
  if cut_off and not (tonumber(run.finished_at) < cut_off) then return {'young'} end
  runs[#runs + 1] = {id = ARGV[i], run = run, ident = ARGV[i + 2]}
end
for _, r in ipairs(runs) do
  local id, run = r.id, r.run
  count(run, run.state, -1)
  redis.call('HDEL', P .. 'keys', r.ident)
  redis.call('ZREM', P .. 'runs', id)
  if run.parent_id then redis.call('SREM', P .. 'children:' .. run.parent_id, id) end
  if run.thread_no then redis.call('ZREM', P .. 'truns:' .. run.thread_no, id) end
  for _, position in ipairs(redis.call('ZRANGE', P .. 'qs:' .. id, 0, -1)) do
    redis.call('DEL', P .. 'q:' .. id .. ':' .. position)
    redis.call('ZREM', P .. 'qpending', id .. ':' .. position)
  end
  redis.call('DEL', run_key(id), P .. 'ev:' .. id, P .. 'steps:' .. id, P .. 'steps_old:' .. id,
             P .. 'children:' .. id, P .. 'qs:' .. id, P .. 'emarks:' .. id)
end
redis.call('DEL', P .. 'reclaimed')
for _, range in ipairs(cjson.decode(ARGV[2])) do
  redis.call('HSET', P .. 'reclaimed', string.format('%d', range[1]), string.format('%d', range[2]))
end
redis.call('SET', P .. 'reclaim_cursor', ARGV[1])
publish()
return {'ok'}
