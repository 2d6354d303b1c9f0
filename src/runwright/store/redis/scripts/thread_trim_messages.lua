-- thread_trim_messages: trim thread histories to their newest messages (retention).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  how many messages each thread keeps    ARGV[2] dry run (0/1)
-- ARGV[3]  the most messages this call removes (the rest wait for the next)
-- then     thread numbers
-- Returns  per thread given, how many of its messages went (or, dry, would go)
--
-- tmsg:<n>'s fields sort oldest first ("<run id, 20 digits><index, 10 digits>"); all but
-- the newest ARGV[1] go, except those of the thread's open runs (topen:<n>): a run that
-- is still going reads its own on a resume. In one step, so that a rollback or an
-- append meanwhile cannot make the thread keep fewer than asked.
local keep, dry, budget = tonumber(ARGV[1]), ARGV[2] == '1', tonumber(ARGV[3])
local out = {}
for i = 4, #ARGV do
  local messages = P .. 'tmsg:' .. ARGV[i]
  local fields = redis.call('HKEYS', messages)
  local removed = 0
  if #fields > keep then
    table.sort(fields)
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
