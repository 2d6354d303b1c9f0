-- question_answer: store the answer to a question and wake its run (rules.plan_answer).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  run id    ARGV[3] position    ARGV[4] the run's state the decision was made on
-- ARGV[5]  the answer (JSON)    ARGV[6] who answered    ARGV[7] the `answered` event's data
-- Returns  {'stale'} when the run's state changed or the question was answered since the
--          decision (the caller reads and decides again), else {'ok', the question's hash}
--
-- A parked run comes due now; one still running (its park on its way) is flagged so that
-- its park wakes at once, as a parent is when its child ends.
local now = now_of(ARGV[1])
local id, position = ARGV[2], ARGV[3]
local key = P .. 'q:' .. id .. ':' .. position
if redis.call('HGET', run_key(id), 'state') ~= ARGV[4] then return {'stale'} end
if redis.call('HEXISTS', key, 'answered_at') == 1 then return {'stale'} end
redis.call('HSET', key, 'answer', ARGV[5], 'answered_by', ARGV[6], 'answered_at', num(now))
redis.call('ZREM', P .. 'qpending', id .. ':' .. position)
redis.call('HINCRBY', run_key(id), 'asking', -1)
log(id, 'answered', ARGV[7], now)
wake_parent(id, now)
publish()
return {'ok', redis.call('HGETALL', key)}
