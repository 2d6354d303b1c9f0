-- flow_reclaim: remove the records of flow control keys no decision needs any more
-- (retention; store._flow_rules.unneeded), the pointers of the hash <prefix>flow.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)    ARGV[2] the longest throttle period, seconds
-- ARGV[3]  the states of a key's run that keep its record, ','-joined (KEEPING_STATES)
-- then     per key: its slot, its pointer "<id>|<at>" as the plan read it
-- Returns  the slots removed
--
-- Each is judged again here, whatever the plan read: the pointer is still the one read
-- (a submitter that moved it since made a run the plan never saw), its run is gone or in
-- none of the keeping states, and a throttle's is past the longest period. A submitter
-- whose insert_flow comes after finds no pointer where it saw one: stale, it decides
-- again, on no record.
local now = now_of(ARGV[1])
local window = tonumber(ARGV[2])
local keeping = {}
for state in string.gmatch(ARGV[3], '[^,]+') do keeping[state] = true end
local out = {}
for i = 4, #ARGV, 2 do
  local slot, read = ARGV[i], ARGV[i + 1]
  local pointer = redis.call('HGET', P .. 'flow', slot)
  if pointer == read then
    local id, at = string.match(pointer, '^(%d+)|(.*)$')
    local state = redis.call('HGET', run_key(id), 'state')
    local due = tonumber(at)
    if not (state and keeping[state])
        and (string.sub(slot, 1, 9) ~= 'throttle:' or due == nil or due < now - window) then
      redis.call('HDEL', P .. 'flow', slot)
      out[#out + 1] = slot
    end
  end
end
return out
