-- insert_threaded: submit a run to a thread, applying the busy plan (rules.plan_busy)
-- to the thread's open runs in the same step.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  what the plan was made from: "id:state:asking" of each open run (asking: its
--          questions nobody answered yet), comma-separated
-- ARGV[3]  the plan's mode ("interrupt", "rollback", or NIL)
-- ARGV[4]  the data of the interrupt events    ARGV[5] the error an interrupted run ends with
-- ARGV[6]  the new run's place in its thread's order when it goes ahead of the runs
--          waiting there (rules.plan_busy; NIL = its id, after them)
-- ARGV[7]  a, the number of running runs to ask to stop; then their ids; then e, the
--          number of begun runs to end now; then their ids
-- then     the run's INSERT_FIELDS values, as in insert.lua; then m and m pairs (parent
--          id, fence), the fenced parents, as in insert.lua
-- Returns  {'lost', parent id, fence} (rules.check_parents_fenced: nothing written),
--          {'deleted'}, {'stale'} (the thread's open runs changed since the plan: read
--          and plan again), or {existed (0/1), the run's hash}
--
-- Submissions to one thread take turns (a script runs alone), so two can never both
-- see the thread idle.
local now = now_of(ARGV[1])
local turn = opt(ARGV[6])
local asks = tonumber(ARGV[7])
local ends_at = 8 + asks
local ends = tonumber(ARGV[ends_at])
local fields_at = ends_at + 1 + ends
local lost = parent_lost(fields_at + INSERT_FIELDS)
if lost then return lost end
local thread_ident = ARGV[fields_at + 15]
local no = thread_no_of(thread_ident, now, true)
if redis.call('HEXISTS', P .. 'thread:' .. no, 'deleted_at') == 1 then return {'deleted'} end
local existing = redis.call('HGET', P .. 'keys', ARGV[fields_at])
if existing then return {1, redis.call('HGETALL', run_key(existing))} end
local seen = {}
for _, id in ipairs(redis.call('ZRANGE', P .. 'topen:' .. no, 0, -1)) do
  local f = redis.call('HMGET', run_key(id), 'state', 'asking')
  seen[#seen + 1] = id .. ':' .. f[1] .. ':' .. (f[2] or '0')
end
if table.concat(seen, ',') ~= ARGV[2] then return {'stale'} end

local mode = opt(ARGV[3])
for i = 8, 7 + asks do
  local id = ARGV[i]
  redis.call('HSET', run_key(id), 'interrupt', mode)
  log(id, 'interrupt_requested', ARGV[4], now)
  cancel_ids[#cancel_ids + 1] = id
end
for i = ends_at + 1, ends_at + ends do
  local id = ARGV[i]
  if mode == 'rollback' then forget_messages(id, load(id)) end
  end_queued(id, 'interrupted', now, 'interrupted', ARGV[4], nil, mode)
end
local id = insert_one(fields_at, now)
if turn then
  -- Ahead of the runs waiting on the thread: its place orders topen (the claim takes
  -- the first) and, through tturn:<n> (run id -> turn; absent: the id), the history.
  redis.call('HSET', run_key(id), 'turn', turn)
  redis.call('ZADD', P .. 'topen:' .. no, turn, id)
  redis.call('HSET', P .. 'tturn:' .. no, id, turn)
end
publish()
return {0, redis.call('HGETALL', run_key(id))}
