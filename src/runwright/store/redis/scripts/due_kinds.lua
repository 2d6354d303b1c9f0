-- due_kinds: queued runs due for at least a while, by (queue, task, major) (read only).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)    ARGV[2] due_for_s
-- Returns  flat quintuples {queue, task, major ('' when unrecorded), count, how long the
--          longest due of them has been due (s)}
--
-- The queues are those the counters know (counts: (tenant, queue, state) -> n), and each
-- queue's due sets name their task and major: one ZCOUNT per due set, never a scan of runs.
local now = now_of(ARGV[1])
local cutoff = now - tonumber(ARGV[2])
local queues, out = {}, {}
for _, field in ipairs(redis.call('HKEYS', P .. 'counts')) do
  local parts = cjson.decode(field)
  if parts[3] == 'queued' then queues[parts[2]] = true end
end
for queue in pairs(queues) do
  for _, due in ipairs(dues_of(queue)) do
    local n = redis.call('ZCOUNT', due.key, '-inf', num(cutoff))
    if n > 0 then
      local first = redis.call('ZRANGE', due.key, 0, 0, 'WITHSCORES')  -- scored by run_at
      out[#out + 1] = queue; out[#out + 1] = due.task; out[#out + 1] = due.major or ''
      out[#out + 1] = n; out[#out + 1] = num(now - tonumber(first[2]))
    end
  end
end
return out
