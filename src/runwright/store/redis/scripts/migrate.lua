-- migrate: record the schema version, never over a newer one.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  the version this code knows
-- Returns  the version found before (the caller refuses a newer one before writing; this
--          re-checks, so two migrators of different versions cannot interleave)
local found = tonumber(redis.call('GET', P .. 'schema_version') or '0')
if found < tonumber(ARGV[1]) then redis.call('SET', P .. 'schema_version', ARGV[1]) end
return found
