package redissource

import "github.com/redis/go-redis/v9"

// Every settle is a script rather than a MULTI: it acts only when the
// element is still in this replica's processing list. Another replica
// may have given the list back to the queue meanwhile (this one's
// heartbeat lapsed); a blind push would then add a second copy, a blind
// dead letter would dead-letter a message someone else is delivering.

// ack: KEYS processing, redelivered; ARGV element. 1 removed, 0 not there.
var ackScript = redis.NewScript(`
local n = redis.call('LREM', KEYS[1], -1, ARGV[1])
if n == 1 then redis.call('HDEL', KEYS[2], redis.sha1hex(ARGV[1])) end
return n`)

// requeue: KEYS processing, queue, redelivered; ARGV element. The element
// goes to the tail, behind what waits, so a message that keeps failing
// does not hold the head of the queue.
var requeueScript = redis.NewScript(`
local n = redis.call('LREM', KEYS[1], 1, ARGV[1])
if n == 1 then
  redis.call('RPUSH', KEYS[2], ARGV[1])
  redis.call('HINCRBY', KEYS[3], redis.sha1hex(ARGV[1]), 1)
end
return n`)

// deadLetter: KEYS processing, dead list, reasons, redelivered; ARGV
// element, reason record (JSON).
var deadLetterScript = redis.NewScript(`
local n = redis.call('LREM', KEYS[1], 1, ARGV[1])
if n == 1 then
  local d = redis.sha1hex(ARGV[1])
  redis.call('RPUSH', KEYS[2], ARGV[1])
  redis.call('HSET', KEYS[3], d, ARGV[2])
  redis.call('HDEL', KEYS[4], d)
end
return n`)

// giveBack moves a replica's processing list back to the head of the
// queue, oldest reservation first, and forgets the replica. KEYS
// heartbeat, processing, queue, replicas, redelivered; ARGV replica,
// force ("1": the caller is that replica, whose heartbeat may still be
// set). -1 when the replica is alive, else how many elements moved.
var giveBackScript = redis.NewScript(`
if ARGV[2] ~= '1' and redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local n = 0
while true do
  local v = redis.call('LMOVE', KEYS[2], KEYS[3], 'LEFT', 'LEFT')
  if not v then break end
  redis.call('HINCRBY', KEYS[5], redis.sha1hex(v), 1)
  n = n + 1
end
if ARGV[2] ~= '1' then redis.call('SREM', KEYS[4], ARGV[1]) end
return n`)

// reserve moves up to ARGV[1] elements from the head of the queue into
// the processing list, as as many LMOVE LEFT LEFT would (the oldest ends
// at the tail), and reads their redelivery marks, in one round trip and
// a few commands whatever their number: LRANGE, LTRIM, LPUSH, and an
// HMGET only when some element is marked at all. KEYS queue,
// processing, redelivered. {elements, marks (1 or 0)}, or false when the
// queue is empty.
var reserveScript = redis.NewScript(`
local vs = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #vs == 0 then return false end
redis.call('LTRIM', KEYS[1], #vs, -1)
redis.call('LPUSH', KEYS[2], unpack(vs))
local marks = {}
if redis.call('EXISTS', KEYS[3]) == 1 then
  local ds = {}
  for i, v in ipairs(vs) do ds[i] = redis.sha1hex(v) end
  local m = redis.call('HMGET', KEYS[3], unpack(ds))
  for i = 1, #vs do marks[i] = m[i] and 1 or 0 end
else
  for i = 1, #vs do marks[i] = 0 end
end
return {vs, marks}`)

// unreserve moves elements reserved and never handed out from the
// processing list back to the head of the queue, ARGV[1] first, without
// a redelivery mark. KEYS processing, queue. How many moved.
var unreserveScript = redis.NewScript(`
local n = 0
for i = #ARGV, 1, -1 do
  if redis.call('LREM', KEYS[1], -1, ARGV[i]) == 1 then
    redis.call('LPUSH', KEYS[2], ARGV[i])
    n = n + 1
  end
end
return n`)

// redrive moves the oldest dead letter back to the tail of the queue,
// as a producer's RPUSH, in one step, when it is still ARGV[1] (the one
// the caller looked at and reported), and removes its reason record
// unless an identical element is still dead. KEYS dead list, queue,
// reasons. 1 moved, 0 the head is another element now.
var redriveScript = redis.NewScript(`
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[1] then return 0 end
redis.call('LPOP', KEYS[1])
redis.call('RPUSH', KEYS[2], ARGV[1])
if not redis.call('LPOS', KEYS[1], ARGV[1]) then
  redis.call('HDEL', KEYS[3], redis.sha1hex(ARGV[1]))
end
return 1`)
