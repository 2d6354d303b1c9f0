-- worker_deregister: a worker leaves; its runs (if any are left) are rescued at once.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  worker id
-- Returns  1
redis.call('HDEL', P .. 'workers', ARGV[1])
redis.call('HDEL', P .. 'beats', ARGV[1])
redis.call('DEL', P .. 'alive:' .. ARGV[1])
return 1
