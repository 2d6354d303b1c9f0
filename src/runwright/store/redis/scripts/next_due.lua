-- next_due: the earliest run_at among queued runs of some queues and tasks (read only).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  q, the number of queues; ARGV[2 .. 1+q] the queues; the rest, the tasks
-- Returns  the run_at, or false when there is none
local queue_count = tonumber(ARGV[1])
local tasks = {}
for i = 2 + queue_count, #ARGV do tasks[ARGV[i]] = true end
local SCAN_LIMIT = 2000
local best = nil
for i = 2, 1 + queue_count do
  local queue = ARGV[i]
  for _, priority in ipairs(redis.call('SMEMBERS', P .. 'prios:' .. queue)) do
    local page = redis.call('ZRANGE', due_key(priority, queue), 0, SCAN_LIMIT - 1, 'WITHSCORES')
    for j = 1, #page, 2 do
      local score = tonumber(page[j + 1])
      if best and score >= best then break end
      if tasks[redis.call('HGET', run_key(tonumber(page[j])), 'task')] then best = score; break end
    end
  end
end
if best then return num(best) end
return false
