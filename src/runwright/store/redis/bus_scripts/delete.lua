-- fleet delete: remove a life's row, only if that life still holds the slot.
--
-- KEYS[1]  <P>life:<kind>-<n>
-- ARGV     generation
-- Returns  1 if deleted, else 0
if redis.call('HGET', KEYS[1], 'generation') ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
