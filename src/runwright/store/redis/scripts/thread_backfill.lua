-- thread_backfill: build layout 3's thread indexes for what layout 2 wrote (an upgrade;
-- idempotent, so a migration cut short is run again whole).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  'threads': then thread identities (JSON [tenant, thread]), each listed by its
--          creation time (thread_index); 'runs': then run ids, each added to its thread's
--          runs (truns:<n>) when it is a thread's (a run reclaimed meanwhile is passed over)
-- Returns  how many were indexed
local indexed = 0
for i = 2, #ARGV do
  if ARGV[1] == 'threads' then
    local no = redis.call('HGET', P .. 'threads', ARGV[i])
    local created_at = no and redis.call('HGET', P .. 'thread:' .. no, 'created_at')
    if created_at then
      thread_index(no, ARGV[i], created_at)
      indexed = indexed + 1
    end
  else
    local thread_no = redis.call('HGET', run_key(ARGV[i]), 'thread_no')
    if thread_no then
      redis.call('ZADD', P .. 'truns:' .. thread_no, ARGV[i], ARGV[i])
      indexed = indexed + 1
    end
  end
end
return indexed
