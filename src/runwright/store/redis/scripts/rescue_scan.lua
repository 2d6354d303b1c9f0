-- rescue_scan: what a rescue must decide about (read only).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  worker_stale_s: a heartbeat this old means dead
-- Returns  {now, {gone worker ids}, {lapsed worker ids}, run hash, ...}: the running
--          runs whose lease expired or whose owner is gone or lapsed
--
-- Redis has no session to tie a worker's life to: a worker is alive while its key
-- alive:<id> (refreshed well inside its TTL by the worker's store) exists and its
-- registration is there. The running set is scored by lease expiry, so expired leases
-- are one range read; a dead owner's runs are its owned set.
local now = now_of(ARGV[1])
local stale_before = now - tonumber(ARGV[2])
local gone, lapsed, seen, runs = {}, {}, {}, {}


local function stuck(id)
  if seen[id] then return end
  seen[id] = true
  local flat = redis.call('HGETALL', run_key(id))
  runs[#runs + 1] = flat
end

local workers = redis.call('HKEYS', P .. 'workers')
for _, worker in ipairs(redis.call('SMEMBERS', P .. 'owners')) do workers[#workers + 1] = worker end
local judged = {}
for _, worker in ipairs(workers) do
  if not judged[worker] then
    judged[worker] = true
    local how = worker_death(worker, stale_before)
    if how then
      table.insert(how == 'gone' and gone or lapsed, tonumber(worker))
      for _, id in ipairs(redis.call('SMEMBERS', P .. 'owned:' .. worker)) do stuck(id) end
    end
  end
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'running', '-inf', '(' .. num(now))) do stuck(id) end
local out = {num(now), gone, lapsed}
for _, flat in ipairs(runs) do out[#out + 1] = flat end
return out
