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
local function eligible(id)  -- id: its text (ids stay text, see int() in lib.lua)
  local v = redis.call('HMGET', run_key(id), unpack(CLAIM_READS))
  if not v[AT.id] or not tasks[v[AT.task]] then return false end
  if v[AT.deadline_at] and tonumber(v[AT.deadline_at]) < now then return false end
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

local due_of = {}  -- padded id -> the due set it was found in
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
      if found < want and eligible(int(page[i])) then
        due_of[page[i]] = key
        into[#into + 1] = with_scores and {tonumber(page[i + 1]), page[i]} or page[i]
        found = found + 1
      end
    end
    if #page < chunk * step then break end
    offset = offset + chunk
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
  -- by their scores, which only then are asked for.
  local merge = #keys > 1
  local candidates = {}
  for _, key in ipairs(keys) do collect(key, want, candidates, merge) end
  if merge then
    table.sort(candidates, function(a, b)
      if a[1] ~= b[1] then return a[1] < b[1] end
      return a[2] < b[2]
    end)
  end
  for i = 1, math.min(want, #candidates) do
    picked[#picked + 1] = merge and candidates[i][2] or candidates[i]  -- padded ids
  end
end

if #picked == 0 then return {} end
redis.call('SADD', P .. 'owners', worker)
local started_at = num(now)
local lease = num(now + lease_s)
local out = {{started_at, lease}}
-- Written after the loop, one command per set: ZREM per due set, one ZADD, one SADD.
local leaving_due, leases, owned = {}, {}, {}
local books = {}  -- one table for every run's counters: a claim moves queued to running
for _, padded in ipairs(picked) do
  local id = int(padded)
  local v = read[id]
  local due = due_of[padded]
  if not leaving_due[due] then leaving_due[due] = {} end
  table.insert(leaving_due[due], padded)
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
end
for due, members in pairs(leaving_due) do call_many('ZREM', due, members) end
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
