"""The ledger's Lua scripts: each update of a call record or claim is one atomic script.

Redis runs a script without interleaving other commands, so a redelivered task racing the
original, or two pollers racing for a session, always see a consistent record.
"""

# ARGV: time, TTL, name, ids, the worker beginning it. Returns the state, the saved result,
# the attempts, and the worker that began the previous attempt (to tell a live one).
# KEYS[2], for sources whose batches can end unanswered, says the batch ended ('gone'):
# a call not yet begun is then not run at all.
# One HMGET reads all it needs and the attempt is counted in the HSET that starts it (the
# script is atomic, so no HINCRBY is needed): three commands on the hot path, not five.
BEGIN = """
local seen = redis.call('HMGET', KEYS[1], 'result', 'attempts', 'worker')
local attempts = tonumber(seen[2] or '0') or 0
if seen[1] then return {'done', seen[1], attempts, false} end
if KEYS[2] then
  local ended = redis.call('GET', KEYS[2])
  if ended then return {'gone', ended, 0, false} end
end
attempts = attempts + 1
if attempts == 1 then
  redis.call('HSET', KEYS[1], 'state', 'started', 'started_at', ARGV[1], 'name', ARGV[3],
             'first_started_at', ARGV[1], 'ids', ARGV[4], 'worker', ARGV[5], 'attempts', 1)
else
  redis.call('HSET', KEYS[1], 'state', 'started', 'started_at', ARGV[1], 'worker', ARGV[5],
             'attempts', attempts)
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return {'started', false, attempts, seen[3]}
"""

# A record created here (all four fields new) gets its TTL; one from begin has it already.
# ARGV: result, time, TTL, the call's ids as a JSON array (kept verbatim, for operators).
FINISH = """
local result = redis.call('HGET', KEYS[1], 'result')
if result then return result end
if redis.call('HSET', KEYS[1], 'state', 'done', 'result', ARGV[1], 'finished_at', ARGV[2],
              'ids', ARGV[4]) == 4 then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return ARGV[1]
"""


def finish_then(then: str) -> str:
    """One script: :data:`FINISH`, then, only if this result is the one saved, ``then``.

    KEYS: the call's record, then ``then``'s keys. ARGV: FINISH's four, then ``then``'s
    arguments. Returns ``{0, the result saved earlier}`` when another copy's result was
    there first (``then`` does not run), else ``{1, then's reply}``: what saves a result
    and passes it on in one round trip (see :mod:`tasks.join`). Each part runs as a Lua
    function whose parameters stand for its own KEYS and ARGV, so both keep their text.
    """
    return f"""local function finish(KEYS, ARGV)
{FINISH}
end
local function after(KEYS, ARGV)
{then}
end
local saved = finish({{KEYS[1]}}, {{ARGV[1], ARGV[2], ARGV[3], ARGV[4]}})
if saved ~= ARGV[1] then
  return {{0, saved}}
end
return {{1, after({{unpack(KEYS, 2)}}, {{unpack(ARGV, 5)}})}}
"""


# Replace a saved result the API refused (its batch is sent again without it).
# ARGV: the replacement, time, the API's reason.
REPLACE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'state', 'done', 'result', ARGV[1], 'replaced_at', ARGV[2],
           'refused_reason', ARGV[3])
return 1
"""

# KEYS: the claim, then the call records; ARGV: owner token, submission key, time, TTL.
MARK_SUBMITTED = """
for i = 2, #KEYS do
  if redis.call('HSET', KEYS[i], 'state', 'submitted', 'submitted_at', ARGV[3],
                'submission_key', ARGV[2]) == 3 then
    redis.call('EXPIRE', KEYS[i], ARGV[4])
  end
end
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""

# KEYS: the claim, the dispatch record; ARGV: token, lease ms, TTL, then field/value pairs.
# The pairs are every field of a dispatch (Dispatch.to_hash), so the HSET replaces the
# previous dispatch whole, with no DEL before it.
CLAIM = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
redis.call('HSET', KEYS[2], unpack(ARGV, 4))
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
"""

RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

RECLAIM = """
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

TAKEOVER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""

# Reopen final calls that still have a saved result (``toolfan resubmit``).
# KEYS: call records; ARGV: time.
REOPEN = """
local n = 0
for i = 1, #KEYS do
  local state = redis.call('HGET', KEYS[i], 'state')
  if (state == 'submitted' or state == 'abandoned')
      and redis.call('HEXISTS', KEYS[i], 'result') == 1 then
    redis.call('HSET', KEYS[i], 'state', 'done', 'reopened_at', ARGV[1])
    n = n + 1
  end
end
return n
"""

# A call waiting for its approval gives its start back: no attempt counted, no worker named
# (so the copy that runs it once approved waits on nobody). ARGV: this runner.
PARK = """
if redis.call('HGET', KEYS[1], 'result') then return 0 end
if redis.call('HGET', KEYS[1], 'worker') ~= ARGV[1] then return 0 end
redis.call('HINCRBY', KEYS[1], 'attempts', -1)
redis.call('HSET', KEYS[1], 'state', 'awaiting_approval', 'worker', '')
return 1
"""

# Keep a batch's claim, and its dispatch's lease, long enough for a call waiting for its
# approval (so no poll takes the batch over, nor counts its claim as stale).
# KEYS: the claim, the dispatch. ARGV: milliseconds from now, now in milliseconds.
EXTEND = """
local ttl = redis.call('PTTL', KEYS[1])
if ttl >= 0 and ttl < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local at = redis.call('HGET', KEYS[2], 'dispatched_at')
if at then
  local need = math.floor(tonumber(ARGV[2]) - tonumber(at) * 1000 + tonumber(ARGV[1]))
  if need > tonumber(redis.call('HGET', KEYS[2], 'lease_ms') or '0') then
    redis.call('HSET', KEYS[2], 'lease_ms', need)
  end
end
return ttl
"""
