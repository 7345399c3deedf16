-- tests/lua/einsum_ref.lua: a naive einsum in plain Lua, the independent reference of the linalg
-- sweep (tests/lua/sweep/linalg.lua's oracles) and of test_einsum.lua: its own parser, then one
-- loop over every assignment of every label, multiplying the operands' elements (read with
-- totable) and adding into the output. Slow (the product of all label sizes), so for small cases;
-- it shares no code with v100.einsum (runtime/ops/einsum.c, runtime/autograd/ops_einsum.c) nor
-- with the GEMM. Semantics as PyTorch's: spaces ignored, implicit output = the ellipsis dims then
-- the letters seen once in byte order, ellipsis dims right-aligned and broadcast, size-1 dims
-- broadcast, a repeated letter in one operand its diagonal, ellipsis dims missing from an explicit
-- output summed. The result is f64 on the CPU.
local v100 = require 'v100'
local M = {}

local function parse_term(s)
  local letters, ell, i = {}, nil, 1
  while i <= #s do
    if s:sub(i, i) == '.' then
      assert(s:sub(i, i + 2) == '...', 'einsum_ref: a lone "."')
      ell = #letters
      i = i + 3
    else
      letters[#letters + 1] = s:sub(i, i)
      i = i + 1
    end
  end
  return letters, ell
end

-- the labels of a term for a tensor of nd dims ('.j' for the ellipsis dims, right-aligned to nell)
local function labels_of(letters, ell, e, nell)
  local l = {}
  for i = 1, #letters + 1 do
    if ell == i - 1 then for j = 1, e do l[#l + 1] = '.' .. (nell - e + j) end end
    if i <= #letters then l[#l + 1] = letters[i] end
  end
  return l
end

function M.einsum(eq, ...)
  local ops = { ... }
  if #ops == 1 and not v100.is_tensor(ops[1]) then ops = ops[1] end
  eq = eq:gsub('%s', '')
  local lhs, rhs = eq:match('^(.-)%->(.*)$')
  lhs = lhs or eq
  local terms = {}
  for t in (lhs .. ','):gmatch('([^,]*),') do terms[#terms + 1] = t end
  assert(#terms == #ops, 'einsum_ref: operand count')
  local parsed, nell, any_ell = {}, 0, false
  for k, t in ipairs(terms) do
    local letters, ell = parse_term(t)
    local e = ell and (#ops[k].shape - #letters) or 0
    parsed[k] = { letters, ell, e }
    if ell then any_ell = true end
    if e > nell then nell = e end
  end
  local labs, size, count, all = {}, {}, {}, {}
  for k, p in ipairs(parsed) do
    labs[k] = labels_of(p[1], p[2], p[3], nell)
    local sh = ops[k].shape
    for d, x in ipairs(labs[k]) do
      if size[x] == nil then all[#all + 1] = x end
      if sh[d] ~= 1 then size[x] = sh[d] else size[x] = size[x] or 1 end
    end
    for _, c in ipairs(p[1]) do count[c] = (count[c] or 0) + 1 end
  end
  local out = {}
  if rhs then
    local letters, ell = parse_term(rhs)
    out = labels_of(letters, ell, nell, nell)
  else
    if any_ell then for j = 1, nell do out[#out + 1] = '.' .. j end end
    local singles = {}
    for c, n in pairs(count) do if n == 1 then singles[#singles + 1] = c end end
    table.sort(singles)
    for _, c in ipairs(singles) do out[#out + 1] = c end
  end
  local osz, onumel = {}, 1
  for i, x in ipairs(out) do
    osz[i] = size[x]
    onumel = onumel * osz[i]
  end
  local data, shapes = {}, {}
  for k, t in ipairs(ops) do
    data[k] = t:totable()
    shapes[k] = t.shape
  end
  local acc = {}
  for i = 1, onumel do acc[i] = 0 end
  local total = 1
  for _, x in ipairs(all) do total = total * size[x] end
  if total > 0 and onumel > 0 then
    local n, idx, assign = #all, {}, {}
    for i = 1, n do
      idx[i] = 1
      assign[all[i]] = 1
    end
    while true do
      local prod = 1
      for k = 1, #ops do
        local v, sh = data[k], shapes[k]
        for d, x in ipairs(labs[k]) do v = v[sh[d] == 1 and 1 or assign[x]] end
        prod = prod * v
      end
      local o = 0
      for i, x in ipairs(out) do o = o * osz[i] + (assign[x] - 1) end
      acc[o + 1] = acc[o + 1] + prod
      local i = n
      while i >= 1 do
        idx[i] = idx[i] + 1
        if idx[i] <= size[all[i]] then break end
        idx[i] = 1
        assign[all[i]] = 1
        i = i - 1
      end
      if i < 1 then break end
      assign[all[i]] = idx[i]
    end
  end
  if onumel == 0 then return v100.zeros(osz, { dtype = 'f64' }) end
  return v100.tensor(acc, { dtype = 'f64' }):reshape(osz)
end

-- torch.matmul through the naive einsum: 1-D operands promoted and their dim removed, batch dims
-- broadcast (the ellipsis).
function M.matmul(a, b)
  local na, nb = #a.shape, #b.shape
  if na == 1 and nb == 1 then return M.einsum('i,i->', a, b) end
  if na == 1 then return M.einsum('j,...jk->...k', a, b) end
  if nb == 1 then return M.einsum('...ij,j->...i', a, b) end
  return M.einsum('...ij,...jk->...ik', a, b)
end

-- beta * bias + alpha * a @ b; beta 0 leaves the bias unread (PyTorch's rule: NaN in it stays out)
function M.addmm(bias, a, b, beta, alpha)
  local p = M.einsum('ij,jk->ik', a, b) * alpha
  if beta == 0 then return p end
  return p + bias:to('f64') * beta
end

return M
