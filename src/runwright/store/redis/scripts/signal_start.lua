-- signal_start: signal-with-start, one write: the run of a key, inserted with its first
-- signal when there is none; when the key names a run already, nothing is written.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2..] the run's INSERT_FIELDS values (see insert.lua)
-- then    name, payload (JSON), key or NIL, sender or NIL, the `signalled` event's data
-- Returns  {existed (0/1), the run's hash as a flat list, the signal's JSON or ''}
local now = now_of(ARGV[1])
local at = 2 + INSERT_FIELDS
local id, existed = insert_one(2, now)
local text = ''
if not existed then
  text = keep_signal(id, '1', ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4], now)
end
publish()
return {existed and 1 or 0, redis.call('HGETALL', run_key(id)), text}
