-- worker_register: a new worker: its registration, heartbeat time and liveness key.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  the registration (JSON: host, pid, queues, tasks, started_at, version, majors)
-- ARGV[2]  now (heartbeat time)    ARGV[3] the liveness key's TTL in milliseconds
-- Returns  the worker's id
local id = redis.call('INCR', P .. 'worker_ids')
redis.call('HSET', P .. 'workers', id, ARGV[1])
redis.call('HSET', P .. 'beats', id, ARGV[2])
redis.call('SET', P .. 'alive:' .. id, 1, 'PX', ARGV[3])
return id
