-- bench/token_bucket.lua: alternative C, the token bucket in Redis, made
-- atomic by running as one script.  KEYS[1]: bucket; ARGV: capacity, rate
-- (tokens a second), cost.  A missing key is a full bucket.  Returns 1
-- when granted, 0 when not.
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1]) or capacity
local ts = tonumber(b[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - ts) * rate)
if tokens < cost then
	return 0
end
redis.call('HSET', KEYS[1], 'tokens', tokens - cost, 'ts', math.max(ts, now))
return 1
