-- run_reclaim: remove ended runs with their journal, log, questions, signals and event waits
-- (retention).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  the scan cursor to keep (the lowest run id the next pass looks at; '' = leave it)
-- ARGV[2]  the cursor the plan started from (another pass that moved it meanwhile wins
--          where it is lower: the cursor never passes a run neither pass removed)
-- ARGV[3]  now ('' = the server's clock)
-- ARGV[4]  the cut-off: a run must have ended before it ('' = none)
-- ARGV[5]  the age a run must have ended ago by `now` ('' = none)
-- ARGV[6]  the thread cap: a run must have at least this many newer runs in its thread
--          ('' = none)
-- then     per run: its id, "state:finished_at" as the plan read it, its key identity
-- Returns  {steps, events, id, id, ...}: the ids removed, and the sizes of their journals
--          and logs
--
-- Each run is judged again here, whatever the plan read: it is still there, still ended
-- with the end the plan saw (a retry that came between made it live, or ended it anew),
-- ended before the cut-off and long enough ago by the server's clock (TIME, read here),
-- and beyond its thread's cap. A run that fails any of these stays, and the others go:
-- two passes at once remove disjoint runs, and neither fails for the other.
--
-- Nothing of a run is left in an index: its key, the runs list, the counters, its
-- parent's children, its thread's runs, the pending questions. Its thread's history is
-- the thread's.
local ENDED = {succeeded = true, failed = true, dead = true, cancelled = true, interrupted = true}
local function seen(run) return run.state .. ':' .. (run.finished_at or '') end
local now = now_of(ARGV[3])
local ended_before = ARGV[4] ~= '' and tonumber(ARGV[4]) or nil
local age_cut_off = ARGV[5] ~= '' and now - tonumber(ARGV[5]) or nil
local cap = ARGV[6] ~= '' and tonumber(ARGV[6]) or nil

local function beyond_cap(id, run)
  if not run.thread_no then return false end
  local newer = redis.call('ZCOUNT', P .. 'truns:' .. run.thread_no, '(' .. id, '+inf')
  return newer >= cap
end

local function still_reclaimable(id, run, as_read)
  if not run or not ENDED[run.state] or not run.finished_at or seen(run) ~= as_read then return false end
  local finished_at = tonumber(run.finished_at)
  if ended_before and not (finished_at < ended_before) then return false end
  if age_cut_off and not (finished_at < age_cut_off) then return false end
  return not cap or beyond_cap(id, run)
end

local function remove(id, run, ident)
  count(run, run.state, -1)
  redis.call('HDEL', P .. 'keys', ident)
  redis.call('ZREM', P .. 'runs', id)
  if run.parent_id then redis.call('SREM', P .. 'children:' .. run.parent_id, id) end
  -- A removed original keeps its set while a fork of it is kept (they still name it).
  if run.forked_from then redis.call('SREM', P .. 'forks:' .. run.forked_from, id) end
  if run.thread_no then redis.call('ZREM', P .. 'truns:' .. run.thread_no, id) end
  for _, position in ipairs(redis.call('ZRANGE', P .. 'qs:' .. id, 0, -1)) do
    redis.call('DEL', P .. 'q:' .. id .. ':' .. position)
    redis.call('ZREM', P .. 'qpending', id .. ':' .. position)
  end
  local names = {}
  for _, text in ipairs(redis.call('HVALS', P .. 'sigs:' .. id)) do names[cjson.decode(text).name] = true end
  for name in pairs(names) do redis.call('DEL', P .. 'sigpend:' .. id .. ':' .. name) end
  local waits = redis.call('HGETALL', P .. 'evw:' .. id)
  for i = 1, #waits, 2 do
    redis.call('HDEL', P .. cjson.decode(waits[i + 1]).waiting, id .. ':' .. waits[i])
  end
  redis.call('DEL', run_key(id), P .. 'ev:' .. id, P .. 'steps:' .. id, P .. 'steps_old:' .. id,
             P .. 'children:' .. id, P .. 'qs:' .. id, P .. 'emarks:' .. id, P .. 'sigs:' .. id,
             P .. 'sigkeys:' .. id, P .. 'sigpos:' .. id, P .. 'evw:' .. id)
end

-- rules.merge_ranges, here where the ranges are read and written in one step: the
-- removed ids as one range from the lowest to the highest, merged with the ranges that
-- touch or overlap it.
local function merged_ranges(ranges, lo, hi)
  ranges[#ranges + 1] = {lo, hi}
  table.sort(ranges, function(a, b) return a[1] < b[1] end)
  local merged = {}
  for _, range in ipairs(ranges) do
    local last = merged[#merged]
    if last and range[1] <= last[2] + 1 then
      if range[2] > last[2] then last[2] = range[2] end
    else
      merged[#merged + 1] = {range[1], range[2]}
    end
  end
  return merged
end

-- Everything is judged and read before anything is written: a script that fails midway
-- (a key of the wrong type) keeps what it wrote, so it must fail before it writes.
local chosen, lowest_kept, lo, hi = {}, nil, nil, nil
for i = 7, #ARGV, 3 do
  local id = ARGV[i]
  local run = load(id)
  if still_reclaimable(id, run, ARGV[i + 1]) then
    chosen[#chosen + 1] = {id = id, run = run, ident = ARGV[i + 2]}
    local n = tonumber(id)
    if not lo or n < lo then lo = n end
    if not hi or n > hi then hi = n end
  elseif run and (not lowest_kept or tonumber(id) < lowest_kept) then
    lowest_kept = tonumber(id)
  end
end
local ranges = {}
local flat = redis.call('HGETALL', P .. 'reclaimed')
for i = 1, #flat, 2 do ranges[#ranges + 1] = {tonumber(flat[i]), tonumber(flat[i + 1])} end
local stored_cursor = tonumber(redis.call('GET', P .. 'reclaim_cursor') or '0')

local removed = {0, 0}
for _, c in ipairs(chosen) do
  removed[1] = removed[1] + redis.call('HLEN', P .. 'steps:' .. c.id) + redis.call('HLEN', P .. 'steps_old:' .. c.id)
  removed[2] = removed[2] + redis.call('LLEN', P .. 'ev:' .. c.id)
  remove(c.id, c.run, c.ident)
  removed[#removed + 1] = c.id
end
if lo then
  redis.call('DEL', P .. 'reclaimed')
  for _, range in ipairs(merged_ranges(ranges, lo, hi)) do
    redis.call('HSET', P .. 'reclaimed', int(range[1]), int(range[2]))
  end
end
if ARGV[1] ~= '' then
  local cursor = tonumber(ARGV[1])
  if lowest_kept and lowest_kept < cursor then cursor = lowest_kept end
  if stored_cursor ~= tonumber(ARGV[2]) and stored_cursor < cursor then cursor = stored_cursor end
  redis.call('SET', P .. 'reclaim_cursor', int(cursor))
end
publish()
return removed
