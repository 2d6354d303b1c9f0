-- claim: take up to `limit` due runs for one worker, in claim order.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  limit (the worker's free slots)
-- ARGV[3]  worker id
-- ARGV[4]  lease_s
-- ARGV[5]  the worker's fleet root ('' = none): a queue it paused is skipped
-- ARGV[6]  q, the number of queues; ARGV[7 .. 6+q] the queues
-- ARGV[7+q] t, the number of tasks; then the t tasks; the rest, "<major>:<task>" of
--          each major each task can run, or '*' alone: any major (rules.claim_keys)
-- Returns  nothing when nothing was claimed (or the worker is not registered); else first {started_at, lease_expires_at}, the
--          same for every run claimed, then the claimed runs, each as the values of
--          CLAIM_READS (_codec.py) as the claim left them, in claim order
--
-- Claim order is priority, then run_at, then submission order. Per (priority, major,
-- queue, task), a due set holds queued run ids (zero-padded) scored by run_at; dues:<queue>
-- lists a queue's sets (lib.lua). The walk takes only the sets of this worker's tasks at
-- majors they can run (and those of runs that recorded no version), goes priority by
-- priority, and within one priority merges the sets by (run_at, id); it stops at `limit`.
-- Nothing scans all runs, nor runs this worker could not run.
--
-- Concurrency limits per key (store._limit_rules): a run that carries limits is never
-- taken by this claim. The limited claim (the same text run as `claim_limited`, where
-- LIMITED is true, given a worker's limited tasks) counts the runs
-- running under each (name, key) from lheld (id -> limits of each limited run running
-- now, kept by this script and by settle_owners in the script that ends its running),
-- applies the operator's overrides (limit_overrides), and takes a run only while every
-- one of its limits has room, counting the runs it takes itself. It finds the runs with
-- limits through their texts' due sets (lib.lua's enqueue): per due set, the texts by
-- their first due run, a text whose keys have no room stepped over whole, and of the
-- others at most as many runs as they have room for, merged in claim order. A big
-- tenant's backlog behind its full key so costs the claim one look, however long it is,
-- and never hides another key's run. The runs without limits of a limited task (submitted
-- before its task declared any) are walked in the due set itself, only when it has some.
--
-- Fair shares (store._fair_rules; the fair claim, `claim_fair`, where FAIR is true too): a
-- run whose limits text carries a fair key ("fair/<name>") is no limit's (room_of skips
-- it). The fair claim reads, past the merge, the first runs of every fair text of a due
-- set with room, and within each priority gives the places of fair runs to the keys in
-- turn, the lowest pass first (the hash `fair`); the passes of the keys it took move on
-- by 1/weight (the weight: limit_overrides' "fair/<name>:<key>", else "fair/<name>", else 1).
local now = now_of(ARGV[1])
local limit = tonumber(ARGV[2])
local worker, lease_s = ARGV[3], tonumber(ARGV[4])
-- Only a registered worker claims: one declared dead (its registration dropped) that is
-- in fact still running takes nothing until its heartbeat registers it again.
if redis.call('HEXISTS', P .. 'workers', worker) == 0 then return {} end
local worker_no = tonumber(worker)
local queue_count = tonumber(ARGV[6])
local queues, tasks, majors = {}, {}, {}
-- A queue the worker's fleet paused is not walked: the pause holds here, in the claim,
-- for a worker that has not heard of it too (the fleet's set, see RedisStore.queue_set_paused).
local paused_key = ARGV[5] ~= '' and (P .. 'fleet:' .. ARGV[5] .. ':paused') or nil
for i = 7, 6 + queue_count do
  if not paused_key or redis.call('SISMEMBER', paused_key, ARGV[i]) == 0 then queues[#queues + 1] = ARGV[i] end
end
local task_count = tonumber(ARGV[7 + queue_count])
for i = 8 + queue_count, 7 + queue_count + task_count do tasks[ARGV[i]] = true end
local any_major = false
for i = 8 + queue_count + task_count, #ARGV do
  if ARGV[i] == '*' then any_major = true else majors[ARGV[i]] = true end
end
-- A due set this worker may take from: its task, at a major it can run (or unrecorded).
local function ours(due)
  if not tasks[due.task] then return false end
  return any_major or not due.major or majors[due.major .. ':' .. due.task] == true
end
-- How many due entries one claim may look at per due set before it gives up on finding
-- eligible ones (runs waiting behind their thread, past their deadline): the hot path
-- stays bounded.
local SCAN_LIMIT = 2000
-- A due run is read once (HMGET of CLAIM_READS, by position): the claim decides on it,
-- updates it and answers with it.
local AT = {}
for i, name in ipairs(CLAIM_READS) do AT[name] = i end

-- Due now and ours to start: a task this worker has, not past its deadline (then it is
-- the deadline expiry's to end), and not waiting on its thread: topen:<n> orders the
-- thread's open runs by turn (the id, but for a run that went ahead of waiting ones), so
-- the run must be the first there, and none of its thread may be running (runs of a
-- thread never overlap, even when a retried one comes first). What was read of an
-- eligible run is kept for its claim.
local read, thread_of = {}, {}  -- thread_of: a threaded run's thread number
-- The limited claim's books: runs running per slot ("<name>:<key>"), the overrides.
local running_by_slot, overrides = {}, {}
if LIMITED then
  for _, limits in ipairs(redis.call('HVALS', P .. 'lheld')) do
    for _, l in ipairs(cjson.decode(limits)) do
      if #l == 3 then  -- a concurrency limit; a rate (five fields) counts no running runs
        local slot = l[1] .. ':' .. l[2]
        running_by_slot[slot] = (running_by_slot[slot] or 0) + 1
      end
    end
  end
  local flat = redis.call('HGETALL', P .. 'limit_overrides')
  for i = 1, #flat, 2 do overrides[flat[i]] = tonumber(flat[i + 1]) end
end
-- A limits text decoded once a claim: the runs of one key all carry it.
local decoded_texts = {}
local function decoded(limits)
  local out = decoded_texts[limits]
  if not out then out = cjson.decode(limits); decoded_texts[limits] = out end
  return out
end
-- limit_rules.effective_max: the key's override, else its name's, else the run's own.
-- How many more runs of `limits` the claim's books have room for (at most `most`).
local function is_fair(name) return string.sub(name, 1, 5) == 'fair/' end  -- a fair key is no limit
local function room_of(limits, most)
  local room = most
  for _, l in ipairs(decoded(limits)) do
    if #l == 3 and not is_fair(l[1]) then
      local slot = l[1] .. ':' .. l[2]
      local left = (overrides[slot] or overrides[l[1]] or tonumber(l[3])) - (running_by_slot[slot] or 0)
      if left < room then room = left end
    end
  end
  return room
end
-- Rates per key (store._rate_rules), [name, key, max, per_s, cost] in a limits text: a
-- key's spends are rate:<slot>, scored by when each one's window ends, as
-- "<id>:<fence>:<cost>" (a run started again spends again). A key's log is read once a
-- claim, and what the claim spends is added to it, and to rate_ends (every key's spends,
-- "<slot>|<id>:<fence>", by the same score: when the next window of any key ends).
local spent_by_slot = {}
local function spent_of(slot)
  local spent = spent_by_slot[slot]
  if spent then return spent end
  local key = P .. 'rate:' .. slot
  -- Ended spends are dropped a while after their end (_rate_rules.PRUNE_AFTER_S): a claim
  -- given an earlier time than one before it still finds those its window holds.
  redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now - 60))
  redis.call('ZREMRANGEBYSCORE', P .. 'rate_ends', '-inf', num(now - 60))
  spent = 0
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', key, '(' .. num(now), '+inf')) do
    spent = spent + tonumber(string.match(member, '([^:]+)$'))
  end
  spent_by_slot[slot] = spent
  return spent
end
-- Whether each rate of `limits` has room for the run's cost now, counting the claim's
-- spends. A key's runs start in their order: once one is held back, the key is blocked
-- for the rest of the claim (a cheaper run behind it does not take the room it waits for).
local blocked = {}
local function rates_allow(limits)
  for _, l in ipairs(decoded(limits)) do
    if #l == 5 and blocked[l[1] .. ':' .. l[2]] then return false end
  end
  for _, l in ipairs(decoded(limits)) do
    if #l == 5 then
      local slot = l[1] .. ':' .. l[2]
      local cap = overrides[slot] or overrides[l[1]] or tonumber(l[3])
      if spent_of(slot) + tonumber(l[5]) > cap then
        blocked[slot] = true
        return false
      end
    end
  end
  return true
end
local function spend(limits, id, fence)
  for _, l in ipairs(decoded(limits)) do
    if #l == 5 then
      local slot = l[1] .. ':' .. l[2]
      local cost = tonumber(l[5])
      redis.call('ZADD', P .. 'rate:' .. slot, num(now + tonumber(l[4])),
                 id .. ':' .. fence .. ':' .. num(cost))
      -- Every key's window ends in one set: a worker whose rated runs are held sleeps
      -- until the next (RunNextDueParams runs="rate_end"), not until its poll.
      redis.call('ZADD', P .. 'rate_ends', num(now + tonumber(l[4])), slot .. '|' .. id .. ':' .. fence)
      spent_by_slot[slot] = spent_by_slot[slot] + cost
    end
  end
end
-- Taken under the claim's books when each of the run's limits has room there, and each of
-- its rates room for its cost (asked last: a run held by a limit spends nothing); false
-- (nothing counted) else. `padded`: the run, whose start a rate's spend names.
local function take_slots(limits, padded)
  if room_of(limits, 1) < 1 then return false end
  if not rates_allow(limits) then return false end
  for _, l in ipairs(decoded(limits)) do
    if #l == 3 then
      local slot = l[1] .. ':' .. l[2]
      running_by_slot[slot] = (running_by_slot[slot] or 0) + 1
    end
  end
  local id = int(padded)
  spend(limits, id, int(read[id][AT.fence] + 1))
  return true
end
-- Fair shares (store._fair_rules; the fair claim): a run's fair slot ("fair/<name>:<key>")
-- and the weight it carries, the passes of keys (the hash `fair`, read for the keys a
-- claim meets; its field 'fair/' is V), and the operator's weight (overrides).
local function fair_slot(limits)
  if not limits then return nil end
  for _, l in ipairs(decoded(limits)) do
    if is_fair(l[1]) then return l[1] .. ':' .. l[2], tonumber(l[3]), l[1] end
  end
  return nil
end
local passes, vt = {}, 0
if FAIR then vt = tonumber(redis.call('HGET', P .. 'fair', 'fair/') or '0') end
local function weight_of(slot, declared, name)
  return math.max(overrides[slot] or overrides[name] or declared, 1)
end
local function pass_of(slot)  -- read once a claim
  if passes[slot] == nil then passes[slot] = tonumber(redis.call('HGET', P .. 'fair', slot) or '-1') end
  return passes[slot]
end
-- A key's pass as a claim judges it (never behind V), in `book` (the real one or a copy).
local function fair_start(book, slot)
  local p = book.passes[slot]
  if p == nil then p = pass_of(slot) end
  return math.max(p, book.vt)
end
local function fair_serve(book, slot, weight)
  local begin = fair_start(book, slot)
  book.vt, book.passes[slot] = begin, begin + 1 / weight
end
-- The candidates of one priority (claim order, {run_at, padded}) in the order a claim
-- takes them: the places of fair runs given each time to the key with the lowest pass.
-- `sim`: the passes as the claim's order so far would move them (one book a claim, as
-- fair_rules.order's); what the claim took is written from the real book (below).
local sim = {vt = vt, passes = {}}
local function fair_order(candidates)
  local places, queues, heads, weights, keys = {}, {}, {}, {}, 0
  for i, c in ipairs(candidates) do
    local slot, declared, name = fair_slot(read[int(c[2])][AT.limits])
    if slot then
      places[#places + 1] = i
      if not queues[slot] then queues[slot], heads[slot], keys = {}, 1, keys + 1 end
      table.insert(queues[slot], i)
      weights[slot] = weight_of(slot, declared, name)
    end
  end
  if keys < 2 then return candidates end
  local out = {}
  for i, c in ipairs(candidates) do out[i] = c end
  for _, place in ipairs(places) do
    local best, best_start, best_at
    for slot, h in pairs(heads) do
      local start, at = fair_start(sim, slot), queues[slot][h]
      if not best or start < best_start or (start == best_start and at < best_at) then
        best, best_start, best_at = slot, start, at
      end
    end
    out[place] = candidates[best_at]
    fair_serve(sim, best, weights[best])
    heads[best] = heads[best] + 1
    if heads[best] > #queues[best] then heads[best] = nil end
  end
  return out
end

-- `text`: the run was found in the due set of its limits text (the limited claim); a run
-- with limits found in a due set itself is not this claim's (the limited claim finds it
-- through its text; a claim that does not know its task as limited never takes it): false
-- and its limits then.
local function eligible(id, text)  -- id: its text (ids stay text, see int() in lib.lua)
  local v = redis.call('HMGET', run_key(id), unpack(CLAIM_READS))
  if not v[AT.id] or not tasks[v[AT.task]] then return false end
  if v[AT.deadline_at] and tonumber(v[AT.deadline_at]) < now then return false end
  if v[AT.limits] and v[AT.limits] ~= text then return false, v[AT.limits] end
  if v[AT.thread] then
    local thread_no = redis.call('HGET', run_key(id), 'thread_no')
    local open = redis.call('ZRANGE', P .. 'topen:' .. thread_no, 0, -1)
    if open[1] and tonumber(open[1]) ~= tonumber(id) then return false end
    for i = 2, #open do
      if redis.call('HGET', run_key(open[i]), 'state') == 'running' then return false end
    end
    thread_of[id] = thread_no
  end
  read[id] = v
  return true
end

local due_of, text_of = {}, {}  -- padded id -> the due set it was found in, its limits text
local first_of = {}  -- a text's due set -> its first run (the text's head), as the walk found it
-- Up to `want` eligible runs of due set `key`, due now, in claim order.
local function collect(key, want, into, with_scores)
  local offset, chunk, found = 0, math.max(want * 2, 32), 0
  local step = with_scores and 2 or 1
  while found < want and offset < SCAN_LIMIT do
    local page
    if with_scores then
      page = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', offset, chunk)
    else
      page = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', offset, chunk)
    end
    for i = 1, #page, step do
      -- A merge sorts {score, member} pairs; a single set is in order already, so its
      -- members go in as they are (no table per candidate).
      if found < want then
        local ok, limits = eligible(int(page[i]))
        if ok then
          due_of[page[i]] = key
          into[#into + 1] = with_scores and {tonumber(page[i + 1]), page[i]} or page[i]
          found = found + 1
        elseif limits and LIMITED then
          -- A run with limits that its text's due set lacks (queued by a process of key
          -- layout 4 still running after the migration): indexed now, the next claim's.
          local own = text_key(key, limits)
          if not redis.call('ZSCORE', own, page[i]) then
            local before = text_head(key, limits)
            redis.call('ZADD', own, page[i + 1], page[i])
            limited_count(key, 1)
            limited_head(key, limits, before)
          end
        end
      end
    end
    if #page < chunk * step then break end
    offset = offset + chunk
  end
end

-- Claim order of two {run_at, padded id} pairs.
local function claim_order(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return a[2] < b[2]
end

-- A binary heap of {run_at, padded id, cursor} in claim order (the merge of the texts).
local function heap_push(heap, entry)
  local i = #heap + 1
  heap[i] = entry
  while i > 1 do
    local up = math.floor(i / 2)
    if not claim_order(heap[i], heap[up]) then break end
    heap[i], heap[up] = heap[up], heap[i]
    i = up
  end
end
local function heap_pop(heap)
  local top, n = heap[1], #heap
  local last = heap[n]
  heap[n] = nil
  n = n - 1
  if n == 0 then return top end
  heap[1] = last
  local i = 1
  while true do
    local low, l, r = i, 2 * i, 2 * i + 1
    if l <= n and claim_order(heap[l], heap[low]) then low = l end
    if r <= n and claim_order(heap[r], heap[low]) then low = r end
    if low == i then break end
    heap[i], heap[low] = heap[low], heap[i]
    i = low
  end
  return top
end

-- A text's due runs, read a page at a time: its next one goes on the heap (its
-- eligibility is judged when it comes off, so a run that is not taken is never read).
local function cursor_next(heap, c)
  if c.pos > #c.page then
    if c.offset >= SCAN_LIMIT or (c.offset > 0 and #c.page < c.chunk * 2) then return end
    c.page = redis.call('ZRANGEBYSCORE', c.key, '-inf', now, 'WITHSCORES', 'LIMIT', c.offset, c.chunk)
    c.offset, c.pos = c.offset + c.chunk, 1
    if #c.page == 0 then return end
  end
  heap_push(heap, {tonumber(c.page[c.pos + 1]), c.page[c.pos], c})
  c.pos = c.pos + 2
end

-- The limited claim's runs with limits in due set `due`, up to `want`, in claim order: a
-- merge of its texts' due sets, each opened (lheads gives them by their first due run)
-- only once its first run would come next, each giving at most as many runs as its keys
-- have room for. A text without room is passed over whole, whatever its backlog.
local function collect_texts(due, want, into)
  local heap, found, looked = {}, 0, 0
  local fair_heads = {}  -- FAIR: the texts of fair keys with room, read after the merge
  local heads, offset, chunk = heads_key(due), 0, 64
  local page, pos = {}, 1
  local function next_head()  -- the next text with room, as {run_at, its head, text, room}
    while looked < SCAN_LIMIT do
      if pos > #page then
        if offset > 0 and #page < chunk * 2 then return nil end
        page = redis.call('ZRANGEBYSCORE', heads, '-inf', now, 'WITHSCORES', 'LIMIT', offset, chunk)
        offset, pos = offset + chunk, 1
        if #page == 0 then return nil end
      end
      local member, run_at = page[pos], tonumber(page[pos + 1])
      pos, looked = pos + 2, looked + 1
      local text = string.sub(member, 21)
      local room = room_of(text, want)
      if room > 0 then
        local head = {run_at, string.sub(member, 1, 20), text, room}
        -- The fair claim reads every fair key's first runs (below), whatever their order.
        if FAIR and fair_slot(text) then fair_heads[#fair_heads + 1] = head else return head end
      end
    end
    return nil
  end
  local pending = next_head()
  while found < want do
    while pending and (#heap == 0 or claim_order(pending, heap[1])) do
      local c = {key = text_key(due, pending[3]), text = pending[3], room = pending[4],
                 page = {}, pos = 1, offset = 0, chunk = math.min(pending[4], want) + 1}
      first_of[c.key] = pending[2]
      cursor_next(heap, c)
      pending = next_head()
    end
    if #heap == 0 then break end
    local entry = heap_pop(heap)
    local c = entry[3]
    if eligible(int(entry[2]), c.text) then
      due_of[entry[2]], text_of[entry[2]] = due, c.text
      into[#into + 1] = {entry[1], entry[2]}
      found, c.room = found + 1, c.room - 1
    end
    if c.room > 0 then cursor_next(heap, c) end
  end
  if not FAIR then return end
  while pending do pending = next_head() end  -- the rest of the texts, for their fair ones
  for _, head in ipairs(fair_heads) do
    local key, text = text_key(due, head[3]), head[3]
    first_of[key] = head[2]
    local n, offset = math.min(head[4], want), 0
    local got, chunk = 0, n + 1
    while got < n and offset < SCAN_LIMIT do
      local runs = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', offset, chunk)
      for i = 1, #runs, 2 do
        if got < n and eligible(int(runs[i]), text) then
          due_of[runs[i]], text_of[runs[i]] = due, text
          into[#into + 1] = {tonumber(runs[i + 1]), runs[i]}
          got = got + 1
        end
      end
      if #runs < chunk * 2 then break end
      offset = offset + chunk
    end
  end
end

-- The due sets of our tasks in our queues, by priority.
local by_priority, priorities = {}, {}
for _, queue in ipairs(queues) do
  for _, due in ipairs(dues_of(queue)) do
    if ours(due) then
      if redis.call('EXISTS', due.key) == 0 then
        redis.call('SREM', P .. 'dues:' .. queue, due.member)  -- the last run of it left
      else
        if not by_priority[due.priority] then
          by_priority[due.priority] = {}
          priorities[#priorities + 1] = due.priority
        end
        table.insert(by_priority[due.priority], due.key)
      end
    end
  end
end
table.sort(priorities)

local picked = {}
for _, priority in ipairs(priorities) do
  local want = limit - #picked
  if want <= 0 then break end
  local keys = by_priority[priority]
  -- One set is already in claim order (run_at, then the padded id); several are merged
  -- by their scores, which only then are asked for. The limited claim merges its texts'.
  local merge = #keys > 1 or LIMITED
  local candidates = {}
  for _, key in ipairs(keys) do
    if LIMITED then
      local with_limits = tonumber(redis.call('HGET', P .. 'lqueued', key) or '0')
      if redis.call('ZCARD', key) > with_limits then collect(key, want, candidates, true) end
      if with_limits > 0 then collect_texts(key, want, candidates) end
    else
      collect(key, want, candidates, merge)
    end
  end
  if merge then
    table.sort(candidates, claim_order)
  end
  if FAIR then candidates = fair_order(candidates) end
  if LIMITED then
    -- In claim order, each while its limits have room, counting those taken before it.
    for i = 1, #candidates do
      if #picked >= limit then break end
      local padded = merge and candidates[i][2] or candidates[i]
      local limits = read[int(padded)][AT.limits]
      if not limits or take_slots(limits, padded) then picked[#picked + 1] = padded end
    end
  else
    for i = 1, math.min(want, #candidates) do
      picked[#picked + 1] = merge and candidates[i][2] or candidates[i]  -- padded ids
    end
  end
end

if #picked == 0 then return {} end
if FAIR then  -- each fair key's pass moved on by 1/weight a run taken, in the claim's order
  local book = {vt = vt, passes = {}}
  local changed = {}
  for _, padded in ipairs(picked) do
    local slot, declared, name = fair_slot(read[int(padded)][AT.limits])
    if slot then
      fair_serve(book, slot, weight_of(slot, declared, name))
      changed[#changed + 1] = slot
    end
  end
  if #changed > 0 then
    local flat = {'fair/', book.vt}
    for _, slot in ipairs(changed) do
      flat[#flat + 1], flat[#flat + 2] = slot, book.passes[slot]
    end
    redis.call('HSET', P .. 'fair', unpack(flat))
  end
end
redis.call('SADD', P .. 'owners', worker)
local started_at = num(now)
local lease = num(now + lease_s)
local out = {{started_at, lease}}
-- Written after the loop, one command per set: ZREM per due set, one ZADD, one SADD.
local leaving_due, leaving_text, leases, owned = {}, {}, {}, {}
local books = {}  -- one table for every run's counters: a claim moves queued to running
for _, padded in ipairs(picked) do
  local id = int(padded)
  local v = read[id]
  local due = due_of[padded]
  if not leaving_due[due] then leaving_due[due] = {} end
  table.insert(leaving_due[due], padded)
  local text = text_of[padded]
  if text then
    local of_due = leaving_text[due]
    if not of_due then of_due = {}; leaving_text[due] = of_due end
    if not of_due[text] then of_due[text] = {} end
    table.insert(of_due[text], padded)
  end
  books.state, books.queue, books.tenant = v[AT.state], v[AT.queue], v[AT.tenant] or nil
  shift(books, 'running')
  local fence = int(v[AT.fence] + 1)
  local attempt = int(math.max(tonumber(v[AT.attempt]), 1))
  local seq = int(v[AT.last_seq] + 1)
  redis.call('HSET', run_key(id), 'state', 'running', 'fence', fence, 'attempt', attempt, 'owner', worker,
             'lease_expires_at', lease, 'started_at', started_at, 'cancel_requested', '0',
             'wake_requested', '0', 'last_seq', seq)
  v[AT.state], v[AT.fence], v[AT.attempt], v[AT.last_seq] = 'running', fence, attempt, seq
  leases[#leases + 1] = lease
  leases[#leases + 1] = id
  owned[#owned + 1] = id
  -- The entry append would make (cjson's), written by one format: its data holds numbers
  -- only, so nothing needs escaping but the quotes written here. Half a µs of Redis CPU a
  -- claimed run, measured.
  append_entry(id, seq, string.format('["started","{\\"attempt\\": %d, \\"worker\\": %d, \\"fence\\": %d}","%s"]',
                                      attempt, worker_no, fence, num(now)), thread_of[id] or false)
  out[#out + 1] = v
  if LIMITED and v[AT.limits] then redis.call('HSET', P .. 'lheld', id, v[AT.limits]) end
end
for due, members in pairs(leaving_due) do call_many('ZREM', due, members) end
for due, texts in pairs(leaving_text) do
  local n = 0
  for text, members in pairs(texts) do
    limited_left(due, text, members, first_of[text_key(due, text)])
    n = n + #members
  end
  limited_count(due, -n)
end
if #leases > 0 and redis.call('EXISTS', P .. 'running') == 0 then
  -- Redis keeps a small sorted set as a listpack, where inserting costs a scan of it:
  -- 200 leases added to a new set cost 0.7 ms. A member longer than
  -- zset-max-listpack-value (64 bytes by default) makes it a skiplist from the start,
  -- and it stays one. Its score (+inf) is never a lease that lapsed, so no reader sees it.
  redis.call('ZADD', P .. 'running', '+inf', string.rep('-', 80) .. ' keeps this set a skiplist')
end
call_many('ZADD', P .. 'running', leases)
call_many('SADD', P .. 'owned:' .. worker, owned)
requeued = false  -- a claim makes nothing due
publish()
return out
