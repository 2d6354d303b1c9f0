-- next_due: the earliest run_at among queued runs of some queues and tasks (read only).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  the worker's fleet root ('' = none)
-- ARGV[2]  '' (any run), or the time (as now_of) after which a run must come due: for a
--          worker whose due runs are held back by their concurrency limits (the first
--          later member of each set, not its due head)
-- ARGV[3]  q, the number of queues; ARGV[4 .. 3+q] the queues; ARGV[4+q] t, the number
--          of tasks; then the t tasks; the rest, claim keys as in claim.lua ('*': any major)
-- Returns  the run_at, or false when there is none
--
-- Only of runs the worker could claim: a due run of another major, or of a queue its
-- fleet paused, must not wake it.
local after = ARGV[2] ~= '' and now_of(ARGV[2] == '*' and '' or ARGV[2]) or nil
local queue_count = tonumber(ARGV[3])
local task_count = tonumber(ARGV[4 + queue_count])
local tasks, majors, any_major = {}, {}, false
for i = 5 + queue_count, 4 + queue_count + task_count do tasks[ARGV[i]] = true end
for i = 5 + queue_count + task_count, #ARGV do
  if ARGV[i] == '*' then any_major = true else majors[ARGV[i]] = true end
end
local paused_key = ARGV[1] ~= '' and (P .. 'fleet:' .. ARGV[1] .. ':paused') or nil
local best = nil
for i = 4, 3 + queue_count do
  local walked = {}
  if not paused_key or redis.call('SISMEMBER', paused_key, ARGV[i]) == 0 then walked = dues_of(ARGV[i]) end
  for _, due in ipairs(walked) do
    if tasks[due.task] and (any_major or not due.major or majors[due.major .. ':' .. due.task]) then
      local first
      if after then
        first = redis.call('ZRANGEBYSCORE', due.key, '(' .. num(after), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      else
        first = redis.call('ZRANGE', due.key, 0, 0, 'WITHSCORES')
      end
      if first[2] then
        local score = tonumber(first[2])
        if not best or score < best then best = score end
      end
    end
  end
end
if best then return num(best) end
return false
