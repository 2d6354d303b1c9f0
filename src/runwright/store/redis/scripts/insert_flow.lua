-- insert_flow: apply the decision of a submission with flow control (store._flow_rules),
-- if what it was decided on is still so; the key's pointer (hash <prefix>flow, slot ->
-- "<id>|<at>") names the key's latest run and the due time it was given.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  the key's slot
-- ARGV[3]  seen: the pointer, then the state, started_at, waiting and args of its run, '|'-joined
--          ('' for no pointer), as flow_probe showed them
-- ARGV[4]  the action: 'insert' or 'update' (a debounce, a batch: the standing run takes the args)
-- ARGV[5]  the due time the plan gives (the new run's, or the updated one's)
-- ARGV[6]  the queued run to cancel (a singleton replaced), or NIL
-- ARGV[7]  the new run's waiting reason, or NIL
-- ARGV[8]  the cancelled run's event data, ARGV[9] its error: templates where @ID@ is the
--          new run's id
-- ARGV[10] update: the standing run's id; ARGV[11] its new args; ARGV[12] its event data;
--          ARGV[13] its event's kind ('debounced', 'batched')
-- ARGV[14..] the new run's INSERT_FIELDS (see insert.lua), then m and m pairs (parent id,
--          fence) of fenced parents
-- Returns  {'stale'} when seen changed; {'lost', parent id, fence}; {'existed', hash}
--          when the run's key names a run; else {'done', the run's hash}
local now = now_of(ARGV[1])
local slot, base = ARGV[2], 14
local pointer = redis.call('HGET', P .. 'flow', slot)
local seen = ''
if pointer then
  local h = redis.call('HMGET', run_key(string.match(pointer, '^(%d+)|')), 'state', 'started_at', 'waiting',
                      'args')
  seen = pointer .. '|' .. (h[1] or '') .. '|' .. (h[2] or '') .. '|' .. (h[3] or '') .. '|' .. (h[4] or '')
end
if seen ~= ARGV[3] then return {'stale'} end
local lost = parent_lost(base + INSERT_FIELDS)
if lost then return lost end
local existing = redis.call('HGET', P .. 'keys', ARGV[base])
if existing then return {'existed', redis.call('HGETALL', run_key(existing))} end
local id
if ARGV[4] == 'update' then
  id = ARGV[10]
  local run = load(id)
  dequeue(id, run)
  run.run_at = ARGV[5]
  redis.call('HSET', run_key(id), 'args', ARGV[11], 'run_at', ARGV[5])
  enqueue(id, run)
  log(id, ARGV[13], ARGV[12], now)
else
  id = insert_one(base, now)
  if opt(ARGV[7]) then redis.call('HSET', run_key(id), 'waiting', ARGV[7]) end
  if opt(ARGV[6]) then
    local data = string.gsub(ARGV[8], '@ID@', id)
    local err = string.gsub(ARGV[9], '@ID@', id)
    end_queued(ARGV[6], 'cancelled', now, 'cancelled', data, err, nil)
  end
end
redis.call('HSET', P .. 'flow', slot, id .. '|' .. ARGV[5])
publish()
return {'done', redis.call('HGETALL', run_key(id))}
