-- flow_probe: what a submission with flow control (store._flow_rules) is decided on.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  the key's slot ("<kind>:<name>:<key>")
-- ARGV[2]  the run's identity (JSON [tenant, key])
-- Returns  {the hash of the run its key names, or {}; the key's pointer "<id>|<at>", or '';
--          the hash of the pointer's run, or {}}
local existing = redis.call('HGET', P .. 'keys', ARGV[2])
local named = {}
if existing then named = redis.call('HGETALL', run_key(existing)) end
local pointer = redis.call('HGET', P .. 'flow', ARGV[1]) or ''
local standing = {}
if pointer ~= '' then standing = redis.call('HGETALL', run_key(string.match(pointer, '^(%d+)|'))) end
return {named, pointer, standing}
