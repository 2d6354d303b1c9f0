-- limits_backfill: index layout 4's queued runs with concurrency limits in their texts'
-- due sets (layout 5, see enqueue in lib.lua): an upgrade, a chunk of one due set a
-- script, so Redis is never held long; idempotent, so a migration cut short is run again.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  a queue    ARGV[2] one of its due sets, as dues:<queue> lists it
-- ARGV[3]  the rank the chunk starts at    ARGV[4] how many runs it holds at most
-- Returns  how many runs of the due set the chunk looked at (fewer than ARGV[4]: the last)
local due
for _, found in ipairs(dues_of(ARGV[1])) do
  if found.member == ARGV[2] then due = found.key end
end
if not due then return 0 end
local page = redis.call('ZRANGE', due, ARGV[3], tonumber(ARGV[3]) + tonumber(ARGV[4]) - 1, 'WITHSCORES')
local touched = {}  -- text -> its head before this chunk (false: none)
for i = 1, #page, 2 do
  local limits = redis.call('HGET', run_key(int(page[i])), 'limits')
  if limits and touched[limits] == nil then touched[limits] = text_head(due, limits) or false end
  if limits and redis.call('ZADD', text_key(due, limits), page[i + 1], page[i]) == 1 then
    limited_count(due, 1)
  end
end
for text, before in pairs(touched) do limited_head(due, text, before or nil) end
return #page / 2
