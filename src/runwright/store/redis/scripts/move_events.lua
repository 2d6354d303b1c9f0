-- move_events: `runwright move` writes event logs copied from another store.
--
-- KEYS[1]  <prefix>ids
-- ARGV     per event, five values: run id, seq, the entry as the log keeps it (JSON
--          [kind, data JSON, at]), the emit's mark (NIL: none), its kind
-- Returns  {'gap', run id, seq} when an event does not follow its log's last (nothing of
--          it written), else 1
--
-- Appended in seq order with their own numbers: ev:<id> holds seq n at index
-- n - 1 - base, base = trimmed_seq - 1 once trimmed (the run's hash, copied before), so a
-- trimmed log starts at its marker as it does here. An event already in the log (a
-- resumed move) is skipped. An emit's mark goes to emarks:<id> as event_append keeps it.
for i = 1, #ARGV, 5 do
  local id, seq = ARGV[i], tonumber(ARGV[i + 1])
  local trimmed = tonumber(redis.call('HGET', run_key(id), 'trimmed_seq') or '0')
  local base = math.max(trimmed - 1, 0)
  local next_seq = base + redis.call('LLEN', P .. 'ev:' .. id) + 1
  if seq > next_seq then return {'gap', id, seq} end
  if seq == next_seq then
    append_entry(id, seq, ARGV[i + 2], false)
    local mark = opt(ARGV[i + 3])
    if mark then redis.call('HSETNX', P .. 'emarks:' .. id, cjson.encode({mark, ARGV[i + 4]}), seq) end
  end
end
return 1
