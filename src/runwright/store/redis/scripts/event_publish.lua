-- event_publish: keep an event by its id and deliver it, as a signal, to the waits whose
-- match fits (decided in Python over the waiting hash as read; each is judged again
-- here: still waiting, its run not ended, room among its pending signals).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  the event's field in evpub (<tenant's length>:<tenant>:<id>)
-- ARGV[3]  the event's JSON as kept {name, data (JSON text), published_by} (woken, full
--          and the time added here; run ids as text: cjson would round large numbers)
-- ARGV[4]  the waiting hash's key suffix    ARGV[5] the data (JSON text)
-- ARGV[6]  sender or NIL    ARGV[7] the most pending signals a run may keep
-- ARGV[8]  the event's id
-- then     "<run id>:<position>" of each fitting wait, in run id order
-- evpub holds the events by field, evpubat their fields by the time published (retention).
-- Returns  {'existed', the event's JSON as kept} when the id was published before
--          (nothing written), else {'ok', woken run ids JSON, full run ids JSON}
local ENDED = {succeeded = true, failed = true, dead = true, cancelled = true, interrupted = true}
local now = now_of(ARGV[1])
local kept = redis.call('HGET', P .. 'evpub', ARGV[2])
if kept then return {'existed', kept} end
local waiting, data, by, cap, event_id = P .. ARGV[4], ARGV[5], opt(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local woken, full, seen = {}, {}, {}
for i = 9, #ARGV do
  local member = ARGV[i]
  local id, position = string.match(member, '^(%d+):(%d+)$')
  if redis.call('HEXISTS', waiting, member) == 1 then
    local run = load_fields(id, {'state', 'signal_seq', 'signals_pending'})
    if not run or not run.state or ENDED[run.state] then
      redis.call('HDEL', waiting, member)  -- an ended run's wait matches nothing again
    elseif tonumber(run.signals_pending or '0') >= cap then
      full[#full + 1] = id
    else
      local seq = int(tonumber(run.signal_seq or '0') + 1)
      local name = 'event:' .. position
      local event = cjson.encode({signal = tonumber(seq), name = name, by = by or cjson.null})
      keep_signal(id, seq, name, data, 'event:' .. event_id .. ':' .. position, by or NIL, event, now)
      redis.call('HDEL', waiting, member)
      local wait = cjson.decode(redis.call('HGET', P .. 'evw:' .. id, position))
      wait.state, wait.event_id = 'delivered', event_id
      redis.call('HSET', P .. 'evw:' .. id, position, cjson.encode(wait))
      if not seen[id] then
        seen[id] = true
        woken[#woken + 1] = id
      end
    end
  end
end
local event = cjson.decode(ARGV[3])
event.published_at, event.woken, event.full = num(now), woken, full
local text = cjson.encode(event)
redis.call('HSET', P .. 'evpub', ARGV[2], text)
redis.call('ZADD', P .. 'evpubat', num(now), ARGV[2])
publish()
return {'ok', cjson.encode(woken), cjson.encode(full)}
