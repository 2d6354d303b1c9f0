-- insert: submit runs, idempotently by (tenant, key).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  n, the number of runs
-- ARGV[3..] per run, INSERT_FIELDS values: identity (JSON [tenant, key]), key, task, queue,
--          priority, args, max_attempts, timeout_s, run_at, parent_id, budget, deadline_at,
--          thread, tenant, submitted event data, thread identity (JSON [tenant, thread]),
--          traceparent, version, major, limits; NIL for a missing value
-- then    m, the number of fenced parents, and m pairs: parent id, fence
-- Returns  per run {existed (0/1), the run's hash as a flat list}; or {'lost', parent id,
--          fence} when a parent is not running at the fence its child was submitted
--          under (rules.check_parents_fenced), and then nothing is written
--
-- A key repeated within one batch makes one run: the second finds the first in `keys`.
local now = now_of(ARGV[1])
local lost = parent_lost(3 + tonumber(ARGV[2]) * INSERT_FIELDS)
if lost then return lost end
local out = {}
for n = 0, tonumber(ARGV[2]) - 1 do
  local id, existed = insert_one(3 + n * INSERT_FIELDS, now)
  out[#out + 1] = {existed and 1 or 0, redis.call('HGETALL', run_key(id))}
end
publish()
return out
