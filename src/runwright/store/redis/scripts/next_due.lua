-- next_due: the earliest run_at among queued runs of some queues and tasks (read only).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  q, the number of queues; ARGV[2 .. 1+q] the queues; the rest, the tasks
-- Returns  the run_at, or false when there is none
local queue_count = tonumber(ARGV[1])
local tasks = {}
for i = 2 + queue_count, #ARGV do tasks[ARGV[i]] = true end
local best = nil
for i = 2, 1 + queue_count do
  for _, due in ipairs(dues_of(ARGV[i])) do
    if tasks[due.task] then
      local first = redis.call('ZRANGE', due.key, 0, 0, 'WITHSCORES')
      if first[2] then
        local score = tonumber(first[2])
        if not best or score < best then best = score end
      end
    end
  end
end
if best then return num(best) end
return false
