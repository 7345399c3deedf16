-- tests/lua/random_checks.lua: distribution tests of the random samplers on one device, shared by
-- tests/lua/test_create.lua (the CPU) and tests/lua/gpu_random.lua (CUDA). Each draws a large
-- sample with a fixed seed and checks its moments or a chi-square statistic against bounds that a
-- correct sampler passes with overwhelming probability (about 5 standard errors for moments; the
-- chi-square bounds are above the 99.99% quantile), so a wrong mapping, range or scale fails.
local v100 = require 'v100'
local M = {}

local N = 200000

local function mean_var(t)
  local f = t:to({ dtype = 'f64', device = 'cpu' })
  local m = f:mean():item()
  local v = ((f - m) * (f - m)):mean():item()
  return m, v
end

-- Pearson's chi-square of integer draws (0-based categories) against expected probabilities.
local function chi2(draws, probs)
  local f = draws:to({ dtype = 'i64', device = 'cpu' }):view(-1)
  local n = f:numel()
  local counts = {}
  for c = 1, #probs do counts[c] = 0 end
  local vals = f:tolist()
  for i = 1, n do
    local c = vals[i] + 1
    if not counts[c] then error('chi2: draw ' .. vals[i] .. ' outside 0..' .. (#probs - 1), 2) end
    counts[c] = counts[c] + 1
  end
  local x = 0
  for c = 1, #probs do
    local e = n * probs[c]
    if e > 0 then x = x + (counts[c] - e) ^ 2 / e
    elseif counts[c] > 0 then return math.huge end -- a draw of a zero-probability category
  end
  return x
end
M.chi2 = chi2

-- 99.99% quantiles of chi-square with df degrees of freedom (rounded up)
local CHI2_BOUND = { [1] = 15.2, [2] = 18.5, [4] = 23.6, [9] = 33.8, [19] = 50.0 }

function M.run(T, dev)
  local function moments(name, t, mean, var)
    local m, v = mean_var(t)
    local se = math.sqrt(var / t:numel())
    T.ok(math.abs(m - mean) < 5 * se, string.format('%s on %s: mean %.5f, expected %.5f (se %.2g)', name, dev, m, mean, se))
    -- the variance's standard error is about var * sqrt(2 / n) for these light-tailed laws; 8 of
    -- them leaves room for the exponential's heavier tail (its fourth moment is 9 var^2)
    T.ok(math.abs(v - var) < 8 * var * math.sqrt(2 / t:numel()),
      string.format('%s on %s: variance %.5f, expected %.5f', name, dev, v, var))
  end

  T.test('uniform_ on ' .. dev .. ': mean and variance of U(-2, 3)', function()
    v100.manual_seed(11)
    for _, dt in ipairs({ 'f32', 'f64' }) do
      local t = v100.empty({ N }, { dtype = dt, device = dev }):uniform_(-2, 3)
      moments('uniform_ ' .. dt, t, 0.5, 25 / 12)
      T.ok(t:min():item() >= -2 and t:max():item() <= 3, 'uniform_ within [-2, 3]')
    end
  end)

  T.test('normal_ on ' .. dev .. ': mean and variance of N(1, 2^2)', function()
    v100.manual_seed(12)
    for _, dt in ipairs({ 'f32', 'f64' }) do moments('normal_ ' .. dt, v100.empty({ N }, { dtype = dt, device = dev }):normal_(1, 2), 1, 4) end
  end)

  T.test('exponential_ on ' .. dev .. ': mean 1/lambd, variance 1/lambd^2, P(x > 1/lambd) = e^-1', function()
    v100.manual_seed(13)
    for _, dt in ipairs({ 'f32', 'f64', 'bf16' }) do
      local t = v100.empty({ N }, { dtype = dt, device = dev }):exponential_(2.5)
      moments('exponential_ ' .. dt, t, 0.4, 0.16)
      T.ok(t:min():item() >= 0, 'exponential_ values >= 0')
      local p = t:to('f64'):gt(0.4):to('f64'):mean():item()
      T.ok(math.abs(p - math.exp(-1)) < 5 * math.sqrt(0.25 / N), 'exponential_ ' .. dt .. ': P(x > 0.4) = ' .. p)
    end
  end)

  T.test('bernoulli_ on ' .. dev .. ': mean p', function()
    v100.manual_seed(14)
    local t = v100.empty({ N }, { device = dev }):bernoulli_(0.3)
    moments('bernoulli_', t, 0.3, 0.21)
  end)

  T.test('randint on ' .. dev .. ': uniform over [low, high) (chi-square), both word mappings', function()
    v100.manual_seed(15)
    local p10 = {}
    for i = 1, 10 do p10[i] = 0.1 end
    local r = v100.randint(-4, 6, { N }, { device = dev })
    T.ok(r:min():item() == -4 and r:max():item() == 5, 'randint(-4, 6): every value in -4..5 drawn, none outside')
    local x = chi2(r - -4, p10)
    T.ok(x < CHI2_BOUND[9], string.format('randint(-4, 6) chi-square %.2f (df 9)', x))
    -- a range above 2^32 takes two words a value: its top bits, scaled to 10 bins, are uniform
    local wide = v100.randint(0, 10 * (1 << 40), { N }, { device = dev })
    x = chi2(wide // (1 << 40), p10)
    T.ok(x < CHI2_BOUND[9], string.format('randint(0, 10 * 2^40) chi-square %.2f (df 9)', x))
    -- the low bits of the wide draws too (a mapping that left them constant would fail)
    x = chi2(wide % 10, p10)
    T.ok(x < CHI2_BOUND[9], string.format('randint(0, 10 * 2^40) %% 10 chi-square %.2f (df 9)', x))
  end)

  T.test('random_ on ' .. dev .. ': [from, to) and the default range', function()
    v100.manual_seed(16)
    local p5 = { 0.2, 0.2, 0.2, 0.2, 0.2 }
    local t = v100.empty({ N }, { dtype = 'i32', device = dev }):random_(3, 8)
    T.ok(chi2(t - 3, p5) < CHI2_BOUND[4], 'random_(3, 8) uniform over 3..7')
    local f = v100.empty({ N }, { dtype = 'f16', device = dev }):random_()
    T.ok(f:min():item() >= 0 and f:max():item() <= 2048, 'random_() on f16 within [0, 2^11]')
    moments('random_() f16', f, 1024, (2049 ^ 2 - 1) / 12)
  end)

  T.test('randperm on ' .. dev .. ': every value once; first position uniform (chi-square)', function()
    v100.manual_seed(17)
    local firsts = {}
    for i = 1, 4000 do
      local p = v100.randperm(5, { device = dev })
      local l = p:cpu():tolist()
      table.sort(l)
      T.eq(l, { 0, 1, 2, 3, 4 }, 'randperm(5) is a permutation')
      firsts[i] = p[1]:item()
    end
    local x = chi2(v100.tensor(firsts, { dtype = 'i64' }), { 0.2, 0.2, 0.2, 0.2, 0.2 })
    T.ok(x < CHI2_BOUND[4], string.format('randperm(5)[1] chi-square %.2f (df 4)', x))
  end)

  T.test('multinomial on ' .. dev .. ': frequencies follow unnormalised weights', function()
    v100.manual_seed(18)
    local w = v100.tensor({ { 2, 0, 6, 2 }, { 1, 1, 1, 1 } }, { dtype = 'f32', device = dev })
    local r = v100.multinomial(w, 50000, { replacement = true })
    local x1 = chi2(r[1], { 0.2, 0, 0.6, 0.2 })
    T.ok(x1 < CHI2_BOUND[2], string.format('row 1 chi-square %.2f (df 2; a zero weight drawn gives inf)', x1))
    T.ok(r[1]:eq(1):sum():item() == 0, 'a zero weight is never drawn')
    local x2 = chi2(r[2], { 0.25, 0.25, 0.25, 0.25 })
    T.ok(x2 < CHI2_BOUND[4], string.format('row 2 chi-square %.2f', x2))
    -- without replacement: the first draw follows the weights, the second the weights of the rest
    -- P(second = j) = sum over i ~= j of P(first = i) * w_j / (10 - w_i)
    local wt = { 1, 2, 7 }
    local nn = 20000
    local rows = v100.tensor(wt, { dtype = 'f64', device = dev }):view(1, 3):expand(nn, 3):contiguous()
    local d = v100.multinomial(rows, 2)
    local first = chi2(d:select(2, 1), { 0.1, 0.2, 0.7 })
    T.ok(first < CHI2_BOUND[2], string.format('first draw without replacement chi-square %.2f', first))
    local second = {}
    for j = 1, 3 do
      local p = 0
      for i = 1, 3 do if i ~= j then p = p + wt[i] / 10 * wt[j] / (10 - wt[i]) end end
      second[j] = p
    end
    local s2 = chi2(d:select(2, 2), second)
    T.ok(s2 < CHI2_BOUND[2], string.format('second draw without replacement chi-square %.2f', s2))
    T.eq(d:select(2, 1):ne(d:select(2, 2)):sum():item(), nn, 'no category twice in a row')
  end)
end

return M
