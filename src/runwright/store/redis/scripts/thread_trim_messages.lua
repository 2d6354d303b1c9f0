-- thread_trim_messages: trim thread histories to their newest messages (retention).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  how many messages each thread keeps    ARGV[2] dry run (0/1)
-- ARGV[3]  the most messages this call removes (the rest wait for the next)
-- then     thread numbers
-- Returns  per thread given, how many of its messages went (or, dry, would go)
--
-- tmsg:<n>'s fields ("<run id, 20 digits><index, 10 digits>") are put in the history's
-- order, (turn, field): a run's turn is its id but for one that went ahead of waiting
-- runs (tturn:<n>). All but the newest ARGV[1] go, except those of the thread's open runs (topen:<n>): a run that
-- is still going reads its own on a resume. In one step, so that a rollback or an
-- append meanwhile cannot make the thread keep fewer than asked.
local keep, dry, budget = tonumber(ARGV[1]), ARGV[2] == '1', tonumber(ARGV[3])
local out = {}
for i = 4, #ARGV do
  local messages = P .. 'tmsg:' .. ARGV[i]
  local fields = redis.call('HKEYS', messages)
  local removed = 0
  if #fields > keep then
    local turns, place = {}, {}
    local flat = redis.call('HGETALL', P .. 'tturn:' .. ARGV[i])
    for j = 1, #flat, 2 do turns[tonumber(flat[j])] = tonumber(flat[j + 1]) end
    for _, field in ipairs(fields) do
      local run_id = tonumber(string.sub(field, 1, 20))
      place[field] = turns[run_id] or run_id
    end
    table.sort(fields, function(a, b)
      if place[a] ~= place[b] then return place[a] < place[b] end
      return a < b
    end)
    local open = {}
    for _, id in ipairs(redis.call('ZRANGE', P .. 'topen:' .. ARGV[i], 0, -1)) do open[pad(id)] = true end
    for j = 1, #fields - keep do
      if budget <= 0 then break end
      if not open[string.sub(fields[j], 1, 20)] then
        budget = budget - 1
        if not dry then redis.call('HDEL', messages, fields[j]) end
        removed = removed + 1
      end
    end
  end
  out[#out + 1] = removed
end
return out
