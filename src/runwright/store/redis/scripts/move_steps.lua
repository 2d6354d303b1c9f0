-- move_steps: `runwright move` writes journal entries copied from another store.
--
-- KEYS[1]  <prefix>ids
-- ARGV     per entry, three values: run id, position, the entry as step.lua keeps it
--          (identity .. "\n" .. created_at)
-- Returns  1
--
-- As the journal would hold them had they been written here: a done snapshot moves the
-- entries before it to steps_old:<id> (archive_before) and is noted in snapshot_at; an
-- entry before a run's snapshot goes to steps_old at once. Writing one again (a resumed
-- move) changes nothing.
for i = 1, #ARGV, 3 do
  local id, position, entry = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local snapshot_at = tonumber(redis.call('HGET', run_key(id), 'snapshot_at') or '-1')
  if position < snapshot_at then
    redis.call('HSET', P .. 'steps_old:' .. id, ARGV[i + 1], entry)
  else
    redis.call('HSET', P .. 'steps:' .. id, ARGV[i + 1], entry)
    if position > snapshot_at and is_snapshot(entry) then archive_before(id, position) end
  end
end
return 1
