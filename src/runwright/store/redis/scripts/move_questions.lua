-- move_questions: `runwright move` writes questions copied from another store.
--
-- KEYS[1]  <prefix>ids
-- ARGV     per question, three values: run id, position, its hash (a JSON object of text
--          values: kind, body, asked_at, and answer, answered_by, answered_at once answered)
-- Returns  1
--
-- As question_open and question_answer keep them: q:<run>:<position>, the run's
-- positions qs:<run>, an unanswered one in qpending by asked_at and counted in the run's
-- `asking`. A question written already (a resumed move) is skipped.
for i = 1, #ARGV, 3 do
  local id, position = ARGV[i], ARGV[i + 1]
  local key = P .. 'q:' .. id .. ':' .. position
  if redis.call('EXISTS', key) == 0 then
    local question, fields = cjson.decode(ARGV[i + 2]), {}
    for name, value in pairs(question) do fields[#fields + 1] = name; fields[#fields + 1] = value end
    redis.call('HSET', key, unpack(fields))
    redis.call('ZADD', P .. 'qs:' .. id, position, position)
    if not question.answered_at then
      redis.call('ZADD', P .. 'qpending', question.asked_at, id .. ':' .. position)
      redis.call('HINCRBY', run_key(id), 'asking', 1)
    end
  end
end
return 1
