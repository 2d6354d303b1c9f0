-- thread_trim_messages: trim thread histories to their newest messages (retention).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  how many messages each thread keeps    ARGV[2] dry run (0/1)
-- then     thread numbers
-- Returns  per thread given, how many of its messages went (or, dry, would go)
--
-- tmsg:<n>'s fields sort oldest first ("<run id, 20 digits><index, 10 digits>"); all but
-- the newest ARGV[1] go, except those of the thread's open runs (topen:<n>): a run that
-- is still going reads its own on a resume. In one step, so that a rollback or an
-- append meanwhile cannot make the thread keep fewer than asked.
local keep, dry = tonumber(ARGV[1]), ARGV[2] == '1'
local out = {}
for i = 3, #ARGV do
  local messages = P .. 'tmsg:' .. ARGV[i]
  local fields = redis.call('HKEYS', messages)
  local removed = 0
  if #fields > keep then
    table.sort(fields)
    local open = {}
    for _, id in ipairs(redis.call('ZRANGE', P .. 'topen:' .. ARGV[i], 0, -1)) do open[pad(id)] = true end
    for j = 1, #fields - keep do
      if not open[string.sub(fields[j], 1, 20)] then
        if not dry then redis.call('HDEL', messages, fields[j]) end
        removed = removed + 1
      end
    end
  end
  out[#out + 1] = removed
end
return out
