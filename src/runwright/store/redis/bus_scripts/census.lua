-- fleet census: every live row of the fleet, and Redis's clock.
--
-- KEYS[1]  <P>names   set of slot names ever claimed
-- ARGV[1]  <P>        the fleet's prefix (life keys are <P>life:<name>, in the same slot)
-- Returns  {now, {field, value, ...}, ...}: one flat HGETALL per live row
local t = redis.call('TIME')
local out = {tostring(tonumber(t[1]) + tonumber(t[2]) / 1000000)}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local row = redis.call('HGETALL', ARGV[1] .. 'life:' .. name)
  if #row > 0 then out[#out + 1] = row end
end
return out
