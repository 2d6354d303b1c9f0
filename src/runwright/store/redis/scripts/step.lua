-- step: journal steps of runs (one per run) and log each, fenced.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- then, per step, 7 values:
--          run id, fence, position, name, status,
--          the entry's identity: JSON [fence, name, status, result, error],
--          the `step` event's data
-- Returns  per step, in order: 1 when journaled (or when this very entry is already
--          there: our own write, its reply lost), 0 when refused
--
-- The journal is steps:<run> (see archive_before in lib.lua: a done snapshot moves what
-- precedes it to steps_old:<run>). A position holds one outcome: only a "started" mark
-- (an at-most-once call) may be completed in place, once; nothing else rewrites it, and
-- a refused write logs nothing. Each step is judged alone, as a script of its own would.
local now = now_of(ARGV[1])

local function record(id, fence, position, name, status, identity, data)
  local run = load(id)
  local steps = P .. 'steps:' .. id
  local existing = redis.call('HGET', steps, position)
  if not existing and run and run.snapshot_at and tonumber(position) < tonumber(run.snapshot_at) then
    existing = redis.call('HGET', P .. 'steps_old:' .. id, position)
  end
  if existing then
    local held = string.match(existing, '^(.-)\n')
    local entry = cjson.decode(held)
    if entry[3] ~= 'started' or status == 'started' then
      if held == identity and owns(run, fence) then return 1 end
      return 0
    end
    if entry[2] ~= name then return 0 end
  end
  if not owns(run, fence) then return 0 end
  redis.call('HSET', steps, position, identity .. '\n' .. num(now))
  if name == 'snapshot' and status == 'done' then archive_before(id, tonumber(position)) end
  log(id, 'step', data, now)
  return 1
end

local out = {}
for i = 2, #ARGV, 7 do
  out[#out + 1] = record(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5],
                         ARGV[i + 6])
end
publish()
return out
