-- thread_delete: mark a thread deleted (new submissions refused); purge its history
-- and its log of events.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  thread identity (JSON [tenant, thread])    ARGV[2] now    ARGV[3] purge (0/1)
-- Returns  1, or 0 if the thread does not exist
local no = thread_no_of(ARGV[1], 0, false)
if not no then return 0 end
redis.call('HSETNX', P .. 'thread:' .. no, 'deleted_at', ARGV[2])
if ARGV[3] == '1' then redis.call('DEL', P .. 'tmsg:' .. no, P .. 'tev:' .. no, P .. 'tturn:' .. no) end
return 1
