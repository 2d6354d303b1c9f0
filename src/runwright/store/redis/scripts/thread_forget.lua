-- thread_forget: rollback: drop what this run added to its thread, fenced.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  run id    ARGV[2] fence
-- Returns  1, or 0 when the fence was refused
local run = load(ARGV[1])
if not owns(run, ARGV[2]) then return 0 end
forget_messages(ARGV[1], run)
return 1
