-- The peer suite's Lua program (benchmarks/peer_suite.py): the interpreter's allocator
-- traffic (tables, strings, closures, the collector's frees) in four parts, then a
-- checksum.  Deterministic: the same output for the same SCALE (arg[1], default 1).
--   trees    binary trees built and dropped (many small tables, short lives)
--   strings  formatting, concatenation, gsub and string keys
--   peak     a big table of records kept at once, then dropped and collected; the line
--            "bench.lua: STEADY dropped" marks what follows as the steady state
--   steady   an LRU-like cache of records, churned at a small size
local scale = tonumber(arg and arg[1]) or 1
local sum = 0
local function add(x) sum = (sum * 31 + x) % 4294967296 end

-- trees
local function make(d)
  if d == 0 then return {} end
  d = d - 1
  return { make(d), make(d) }
end
local function check(t)
  if not t[1] then return 1 end
  return 1 + check(t[1]) + check(t[2])
end
local long = make(14)
for d = 4, 16, 2 do
  local iters = math.floor((1 << (16 - d + 4)) * scale)
  for _ = 1, iters do add(check(make(d))) end
end
add(check(long)); long = nil

-- strings
local words = {}
for i = 1, math.floor(200000 * scale) do
  local s = string.format("key:%d:%x", i, (i * 2654435761) % 4294967296)
  words[s] = i
  if i % 3 == 0 then words[s] = nil end
end
local n = 0
for _, v in pairs(words) do n = n + v end
add(n % 4294967296)
local parts = {}
for i = 1, math.floor(100000 * scale) do parts[#parts + 1] = tostring(i * 7) end
local big = table.concat(parts, ",")
local replaced, count = big:gsub("7", "seven")
add(#replaced); add(count)
parts, big, replaced, words = nil, nil, nil, nil

-- peak
local recs = {}
for i = 1, math.floor(1500000 * scale) do
  recs[i] = { id = i, name = "r" .. i, tags = { i % 7, i % 11 } }
end
local acc = 0
for i = 1, #recs, 97 do acc = acc + recs[i].tags[1] + #recs[i].name end
add(acc)
recs = nil
collectgarbage("collect")
print("bench.lua: STEADY dropped")
io.stdout:flush()

-- steady
local cache, order, head = {}, {}, 1
local size = 20000
for i = 1, math.floor(3000000 * scale) do
  local k = (i * 40503) % 65536
  local v = cache[k]
  if v then
    add(v.n % 1000)
  else
    v = { n = i, s = "v" .. k }
    cache[k] = v
    order[#order + 1] = k
    if #order - head + 1 > size then cache[order[head]] = nil; order[head] = nil; head = head + 1 end
  end
end
print(string.format("bench.lua: scale=%g checksum=%08x", scale, sum))
