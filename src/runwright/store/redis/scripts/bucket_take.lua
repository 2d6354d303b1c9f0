-- bucket_take: store a token bucket's new level, if it is still the level the decision
-- was made on (rules.take_from_bucket decides in Python; this applies it or says stale).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  bucket name    ARGV[2] tokens read    ARGV[3] updated_at read (NIL: no bucket yet)
-- ARGV[4]  new tokens     ARGV[5] new updated_at
-- Returns  1 when stored, 0 when the bucket changed since it was read (decide again)
--
-- The bucket is the hash bucket:<name> {tokens, updated_at}. Values are compared as the
-- strings Python read and wrote (%.17g round-trips a double exactly).
local key = P .. 'bucket:' .. ARGV[1]
local found = redis.call('HMGET', key, 'tokens', 'updated_at')
if ARGV[3] == NIL then
  if found[2] then return 0 end
elseif found[1] ~= ARGV[2] or found[2] ~= ARGV[3] then
  return 0
end
redis.call('HSET', key, 'tokens', ARGV[4], 'updated_at', ARGV[5])
return 1
