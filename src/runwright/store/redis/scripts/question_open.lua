-- question_open: a run asks a question (ctx.ask, a tool call to approve), fenced.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  run id    ARGV[3] fence    ARGV[4] journal position
-- ARGV[5]  kind      ARGV[6] body (JSON)    ARGV[7] the `asked` event's data
-- Returns  {} when the fence was refused, else the question's hash (flat)
--
-- A question is the hash q:<run>:<position>; qs:<run> lists a run's positions and
-- qpending the unanswered ones ("<run>:<position>" by asked_at). Asking again at the
-- same position (a replay) changes nothing: the caller gets the question as it stands.
local now = now_of(ARGV[1])
local id, fence, position = ARGV[2], ARGV[3], ARGV[4]
if not owns(load_fields(id, {'state', 'fence'}), fence) then return {} end
local key = P .. 'q:' .. id .. ':' .. position
if redis.call('EXISTS', key) == 0 then
  redis.call('HSET', key, 'kind', ARGV[5], 'body', ARGV[6], 'asked_at', num(now))
  redis.call('ZADD', P .. 'qs:' .. id, position, position)
  redis.call('ZADD', P .. 'qpending', now, id .. ':' .. position)
  -- How many questions of the run wait: a run waiting on a person leaves its thread free.
  redis.call('HINCRBY', run_key(id), 'asking', 1)
  log(id, 'asked', ARGV[7], now)
end
publish()
return redis.call('HGETALL', key)
