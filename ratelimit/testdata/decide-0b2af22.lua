-- decideSrc (ratelimit/script.go) as of 0b2af22, the last version to
-- write a TAT as a number (snprintf("%.17g") in Redis): TestTATSharedAcrossVersions
-- runs it beside the current one on the same keys, as replicas of both
-- versions do during a rolling upgrade.
-- Locals, not globals, for what every decision calls: a global is two
-- table lookups.
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local t = redis.call("TIME")
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local nums, decode = ARGV[1], struct.unpack
local nreq, nlim, nt, p = decode("<i4i4i4", nums)
local le, lb = {}, {}
for i = 1, nlim do
  le[i], lb[i], p = decode("<dd", nums, p)
end
local s = 2
-- Every TAT at once: one MGET costs Redis less than a GET per key.
local stored = {}
for i = 1, nt, 1000 do
  local last = min(i + 999, nt)
  local part = redis.call("MGET", unpack(KEYS, i, last))
  for j = i, last do
    stored[j] = part[j - i + 1]
  end
end
local tats, charge, answer, dirty, changed, nd = {}, {}, {}, {}, {}, 0
local function set(k, tat)
  tats[k] = tat
  if not dirty[k] then
    dirty[k] = true
    nd = nd + 1
    changed[nd] = k
  end
end
local out, n = {}, 0
for _ = 1, nreq do
  local cost, nchecks, guard, nclaim
  cost, nchecks, guard, nclaim, p = decode("<di4i4i4", nums, p)
  local head, branch = n + 1, 1
  out[head] = cost > 0 and 1 or 0
  n = head
  if guard > 0 then
    local key, member, gmax, window = KEYS[nt + guard], ARGV[s]
    gmax, window, p = decode("<dd", nums, p)
    s = s + 1
    if redis.call("SISMEMBER", key, member) == 0 then
      local size = redis.call("SCARD", key)
      if size < gmax then
        redis.call("SADD", key, member)
        if size == 0 then
          redis.call("PEXPIRE", key, window)
        end
      else
        branch = 2
      end
    end
    out[n + 1], out[n + 2] = branch, redis.call("PTTL", key)
    n = n + 2
  end
  local nc, na = 0, 0
  for _ = 1, nchecks do
    local k, li, flags
    k, li, flags, p = decode("<i4i4B", nums, p)
    local e, burst = 0, 0
    if li > 0 then
      e, burst = le[li], lb[li]
    end
    local when, allowance = (flags - flags % 2) / 2 % 4, flags >= 8
    local tat = tats[k]
    if tat == nil then
      tat = tonumber(stored[k]) or 0
      tats[k] = tat
    end
    if cost < 0 then
      if allowance and e > 0 then
        set(k, max(tat, now) - cost * e)
      elseif tat > now and not allowance then
        set(k, tat + cost * e)
      end
      out[n + 1] = 0
      n = n + 1
    elseif when ~= 0 and when ~= branch then
      out[n + 1] = 0
      n = n + 1
    elseif e <= 0 then
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 3, 0, 0, 0
      n = n + 4
      if flags % 2 == 0 then
        out[head] = 0
      end
    else
      if tat < now then
        tat = now
      end
      local new_tat = tat + cost * e
      local diff = now - (new_tat - e * burst)
      if diff < 0 then
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 2, 0, ceil(-diff * 1000000), ceil((tat - now) * 1000000)
        if flags % 2 == 0 then
          out[head] = 0
        end
      else
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 1, floor(diff / e * 1000000 + 0.5), 0, ceil((new_tat - now) * 1000000)
        if allowance then
          answer[na + 1], answer[na + 2] = k, new_tat
          na = na + 2
        else
          charge[nc + 1], charge[nc + 2] = k, new_tat
          nc = nc + 2
        end
      end
      n = n + 4
    end
  end
  local pass, answered = out[head] == 1, false
  if nclaim > 0 then
    local ck, ca = {}, {}
    local ki, na
    for i = 1, nclaim do
      ki, p = decode("<i4", nums, p)
      ck[i] = KEYS[nt + ki]
    end
    na, p = decode("<i4", nums, p)
    for i = 1, na do
      ca[i] = ARGV[s + i - 1]
    end
    s = s + na
    if pass then
      local ok, r = pcall(claim, ck, ca)
      if not ok then
        r = {"error", type(r) == "table" and r.err or tostring(r)}
      elseif r.err then
        r = {"error", r.err}
      end
      out[n + 1] = #r
      for i = 1, #r do
        out[n + 1 + i] = r[i]
      end
      n = n + 1 + #r
      pass = r[1] == "claimed"
      answered = not pass
    else
      out[n + 1] = 0
      n = n + 1
    end
  end
  if pass then
    for i = 1, nc, 2 do
      set(charge[i], charge[i + 1])
    end
  elseif answered then
    for i = 1, na, 2 do
      set(answer[i], answer[i + 1])
    end
  end
end
for i = 1, nd do
  local k = changed[i]
  local left = tats[k] - now
  if left > 0 then
    -- At least a second: an interval below the TAT's float precision
    -- leaves it at now. One second, the usual expiry, as a string: Redis
    -- formats a number argument with snprintf("%.17g"), which costs it
    -- more than the GET of a key.
    local ex = ceil(left)
    if ex <= 1 then
      ex = "1"
    end
    redis.call("SET", KEYS[k], tats[k], "EX", ex)
  else
    redis.call("DEL", KEYS[k])
  end
end
return out
