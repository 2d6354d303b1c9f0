-- thread_reclaim: remove the tombstones of threads deleted long enough ago (retention),
-- so that their names are free for new threads.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)    ARGV[2] the age in seconds
-- then     per thread: its identity (JSON [tenant, thread]), its number as the plan read it
-- Returns  the identities of the threads whose tombstones were removed
--
-- Each is re-checked here, by the server's clock (TIME), whatever the plan read: the
-- name still names that number, it is deleted, long enough ago, and no run of it is
-- open (a delete that did not finish keeps the name taken). Its number is never given
-- again (thread_ids only grows): a new thread of the name gets a larger one, and a
-- reader that holds the old number is told the thread was deleted.
local cut_off = now_of(ARGV[1]) - tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 2 do
  local ident, no = ARGV[i], ARGV[i + 1]
  local deleted_at = redis.call('HGET', P .. 'thread:' .. no, 'deleted_at')
  if redis.call('HGET', P .. 'threads', ident) == no and deleted_at and tonumber(deleted_at) < cut_off
      and redis.call('ZCARD', P .. 'topen:' .. no) == 0 then
    redis.call('HDEL', P .. 'threads', ident)
    redis.call('ZREM', P .. 'tlist', ident)  -- listed no more (see thread_list)
    redis.call('ZREM', P .. 'tlist:' .. cjson.decode(ident)[1], ident)
    redis.call('DEL', P .. 'thread:' .. no, P .. 'topen:' .. no, P .. 'tmsg:' .. no, P .. 'tev:' .. no,
               P .. 'truns:' .. no, P .. 'tturn:' .. no)
    out[#out + 1] = ident
  end
end
return out
