// The per-block dynamic programme of the operator-level solver (autoparallel_solver.h).
#include "autoparallel_solver.h"

#include "autoparallel_state_map.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <map>
#include <unordered_map>

namespace colo::planner::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// States kept per step when a block has more live tensors than the exact solve holds (a raw op graph
// with wide branches): the cheapest this many, an approximation docs/autoparallel.md states.
constexpr std::size_t kBeam = 20000;

// One state of the DP: its objective and how it was reached. Kept this small (24 bytes) because the
// tables are the solver's memory traffic; what a plan sums (seconds, bytes, collectives) is summed again
// along the chosen path only (BlockDp::totalsOf).
struct Entry {
  double objective = kInf;
  std::uint64_t previous = 0;
  std::int32_t strategy = -1;
  bool recompute_ = false;
  std::uint8_t keepBefore = 0;
};
static_assert(sizeof(Entry) == 24);

// What a plan sums over its units, in the order the DP extends it.
struct Totals {
  double seconds = 0, compute = 0, comm = 0, recompute = 0, activation = 0, state = 0, params = 0, optimizer = 0;
  double forward = 0, opsFwd = 0, opsBwd = 0, opsRec = 0;
  double sync[3] = {0, 0, 0};
};

// State key: the entry layout, then per live tensor its layout and whether its producer recomputes it.
std::uint64_t pack(int entry, const std::vector<std::pair<int, bool>>& live) {
  std::uint64_t key = static_cast<std::uint64_t>(entry);
  for (const auto& [layout, dropped] : live) key = (key << 6) | (static_cast<std::uint64_t>(layout) << 1) | (dropped ? 1u : 0u);
  return key;
}
void unpack(std::uint64_t key, std::size_t count, int& entry, std::vector<std::pair<int, bool>>& live) {
  live.assign(count, {0, false});
  for (std::size_t i = count; i-- > 0;) {
    live[i] = {static_cast<int>((key >> 1) & 31u), (key & 1u) != 0};
    key >>= 6;
  }
  entry = static_cast<int>(key);
}

}  // namespace

// Step tables kept between solves on one thread, so that the next solve's tables reuse their memory.
std::vector<StateMap<Entry>>& spareSteps() {
  thread_local std::vector<StateMap<Entry>> spare;
  return spare;
}
std::vector<StateMap<Entry>> takeSpareSteps() { return std::move(spareSteps()); }
void giveBackSteps(std::vector<StateMap<Entry>>&& steps) {
  for (auto& s : steps) s.reset();
  auto& spare = spareSteps();
  if (steps.size() > spare.size()) spare = std::move(steps);
}

// The dynamic programme of one solve. Steps are the states before each unit; at a cut (one tensor
// live, not the block's input) the states restart from zero keyed by that tensor, so what lies after a
// cut does not multiply by every entry layout; the segments are joined at the end (min-plus).
class BlockDp {
 public:
  BlockDp(const BlockSolver& solver, const SolveWeights& weights) : m_s(solver), m_w(weights), m_n(solver.m_block->units.size()) {
    std::vector<int> live;
    if (m_s.m_block->hasInput) live.push_back(0);
    m_live.resize(m_n + 1);
    for (std::size_t u = 0; u <= m_n; ++u) {
      m_live[u] = live;
      if (u == m_n) break;
      std::vector<int> next;
      for (const int t : live) {
        if (m_s.m_lastUse[static_cast<std::size_t>(t)] > static_cast<int>(u)) next.push_back(t);
      }
      if (m_s.m_lastUse[u + 1] > static_cast<int>(u)) next.push_back(static_cast<int>(u) + 1);
      live = std::move(next);
    }
    for (const auto& l : m_live) {
      if (l.size() > 9) throw std::logic_error("block " + m_s.m_block->name + " keeps more than 9 tensors live");
    }
    // The step tables of earlier solves on this thread, emptied (their memory is reused).
    m_steps = takeSpareSteps();
    m_steps.resize(m_n + 1);
  }
  BlockDp(const BlockDp&) = delete;
  BlockDp& operator=(const BlockDp&) = delete;
  ~BlockDp() { giveBackSteps(std::move(m_steps)); }

  std::vector<BlockPlan> run(const std::vector<Layout>& entries, const BlockSolver::ExitCost& exitCost) {
    const DeviceMesh& mesh = *m_s.m_context.mesh;
    Entry start;
    start.objective = 0;
    if (m_s.m_block->hasInput) {
      for (const Layout e : entries) {
        if (e.partial() || !fits(e, m_s.m_block->input, m_s.m_context.samples, mesh)) continue;
        *m_steps[0].tryEmplace(pack(e.index() * 2, {{e.index(), false}})).first = start;
      }
    } else {
      *m_steps[0].tryEmplace(pack(0, {})).first = start;
    }
    leaveOutFruitlessRecompute();
    for (std::size_t u = 0; u < m_n; ++u) {
      advance(u);
      const auto& live = m_live[u + 1];
      if (u + 1 < m_n && live.size() == 1 && live[0] != 0) cut(u + 1);
    }
    return finish(exitCost);
  }

 private:
  // Whether the recompute bit of live tensor `t` still matters before unit `u`: a later consumer keeps it
  // for its backward or may recompute from it.
  [[nodiscard]] bool bitMatters(int t, std::size_t u) const {
    return m_s.m_lastSaver[static_cast<std::size_t>(t)] >= static_cast<int>(u) ||
           (m_w.recompute != RecomputeMode::kNone && m_s.m_lastUse[static_cast<std::size_t>(t)] >= static_cast<int>(u));
  }

  // Inputs a unit keeps for backward under one strategy and recompute choice.
  struct Kept {
    double bytes = 0, redo = 0;  // bytes kept; conversions repeated backward
    std::uint8_t before = 0;     // per input: kept before its conversion
  };
  // What one unit adds under one choice.
  struct Step {
    double seconds = 0, comm = 0, recompute = 0, activation = 0, state = 0;
    double optimizer = 0;  // parameters whose optimizer states the GPU holds
    double forward = 0, opsFwd = 0, opsBwd = 0, opsRec = 0;
  };
  [[nodiscard]] std::array<bool, 2> recomputeChoices(std::size_t u) const;
  // Ranks the optimizer states of a strategy's parameters are split over: the mesh's replicated axes
  // (ZeRO-1) and the copies of the mesh.
  [[nodiscard]] double optimizerSplit(const Strategy& st) const {
    return st.optimizerShard * static_cast<double>(m_s.m_context.replicas);
  }
  // `t` extended by one unit's choice.
  static void extend(Totals& t, const Strategy& st, const Step& step);
  // What a unit's choices do not take from the state.
  struct UnitFixed {
    std::vector<std::size_t> inputAt;  // per input: its place among the live tensors
    std::array<bool, 2> choices{};     // keep, recompute allowed
    std::vector<char> allowed;         // per strategy
    std::vector<double> sync, state;   // per strategy: amortised gradient reduction seconds, state bytes
    std::vector<double> stateCost;     // per strategy: lambda x state bytes
    double memoryPrice = 0;            // per activation byte
    bool outputBit = false;            // whether the output's recompute bit matters later
  };
  // A unit's inputs in one state, looked up once for all of its strategies: each input's layout, whether
  // its producer recomputes it, and its rows of the conversion tables (per strategy, per layout).
  struct Inputs {
    static constexpr std::size_t kMost = 9;  // (as many as a block keeps live)
    std::size_t count = 0;
    std::array<std::size_t, kMost> layout{};
    std::array<bool, kMost> dropped{};
    std::array<double, kMost> share{}, bytes{};  // its share of the unit's saved input bytes; its whole bytes
    std::array<const std::array<float, kLayouts>*, kMost> fwd{}, bwd{};
    std::array<const std::array<std::uint8_t, kLayouts>*, kMost> ops{};
  };
  // The inputs of unit `u` in the state `key` (of `m_live[u]`).
  [[nodiscard]] Inputs inputsOf(std::size_t u, const UnitFixed& f, std::uint64_t key) const;
  // kept[0] without recompute, kept[1] with (when `withRecompute`).
  [[gnu::always_inline]] inline void keptInputs(std::size_t u, std::size_t s, const Inputs& in, double memoryPrice, bool withRecompute, std::array<Kept, 2>& kept) const;
  // One choice of a unit from a given input signature: only what the DP compares (the rest of what
  // the choice adds is described again along the chosen path, stepOf()). Kept small: the options of a
  // step are the DP's second-largest memory traffic.
  struct Option {
    double seconds = 0, stateCost = 0, price = 0;  // added: time, lambda x state bytes, the activations' price
    double cost = 0;                                // their sum: the objective added
    std::int32_t strategy = 0;
    bool recompute = false;
    std::uint8_t keepBefore = 0;
    std::uint8_t outCode = 0;                       // the output's layout and recompute bit
  };
  [[nodiscard]] UnitFixed unitFixed(std::size_t u) const;
  void leaveOutFruitlessRecompute();
  // Appends to `out` the unit's cheapest choice for each output code, given its inputs `in`.
  void options(std::size_t u, const UnitFixed& f, const Inputs& in, std::vector<Option>& out) const;
  // The conversions strategy `s` of the unit whose inputs are `in` needs: seconds forward, backward,
  // and their collectives (false when a conversion is impossible).
  struct Conversions {
    double fwd = 0, bwd = 0, ops = 0;
  };
  [[nodiscard, gnu::always_inline]] static inline bool conversions(const Inputs& in, std::size_t s, Conversions& c);
  // One choice (strategy `s`, recompute or not) of unit `u`: its cost (describe) and everything it adds
  // (stepOf); both take the seconds, recompute seconds and activation bytes from one place (timeOf).
  [[gnu::always_inline]] inline void describe(std::size_t u, const UnitFixed& f, std::size_t s, bool recompute, const Conversions& conv, const Kept& kept,
                Option& o) const;
  [[nodiscard]] Step stepOf(std::size_t u, const UnitFixed& f, std::size_t s, bool recompute, const Conversions& conv,
                            const Kept& kept) const;
  struct Time {
    double seconds, recompute, comm, activation;  // Step's fields of the same names
  };
  [[nodiscard, gnu::always_inline]] inline Time timeOf(std::size_t u, const UnitFixed& f, std::size_t s, bool recompute,
                                                      const Conversions& conv, const Kept& kept) const;
  static void prune(StateMap<Entry>& states);
  void advance(std::size_t u);
  void cut(std::size_t k);
  // The best way from each entry to each state at a cut, joined segment by segment.
  struct Prefix {
    double objective = 0;          // of the segments joined so far
    std::uint64_t reachedKey = 0;  // the state reaching the cut, in the previous segment's keys
    std::int64_t previous = -1;    // index of the prefix it extends (the previous cut)
    int entry = 0;                 // the block's entry code
    int z = 0;                     // the cut's code: its tensor's layout and recompute bit
  };
  [[nodiscard]] std::vector<std::vector<Prefix>> joinCuts() const;
  [[nodiscard]] static std::vector<std::vector<std::size_t>> indexByCode(const std::vector<Prefix>& list);
  [[nodiscard]] BlockPlan planOf(Layout entry, Layout exit, double objective, std::uint64_t key, std::int64_t prefix,
                                 const std::vector<std::vector<Prefix>>& prefixes) const;
  std::vector<BlockPlan> finish(const BlockSolver::ExitCost& exitCost);
  // Fills plan.units[to, from) and `stateAt` (the state key before each unit) walking back from `key`.
  void walkBack(std::size_t from, std::size_t to, std::uint64_t key, bool atCut, BlockPlan& plan,
                std::vector<std::uint64_t>& stateAt) const;
  // The sums of units [from, to) along the plan's choices, from zero.
  [[nodiscard]] Totals totalsOf(std::size_t from, std::size_t to, const BlockPlan& plan, const std::vector<std::uint64_t>& stateAt) const;

  const BlockSolver& m_s;
  const SolveWeights& m_w;
  std::size_t m_n;
  std::vector<std::vector<int>> m_live;
  std::vector<StateMap<Entry>> m_steps;
  std::vector<std::size_t> m_cuts;
  std::map<std::size_t, StateMap<Entry>> m_reached;  // states reaching each cut, before the restart
  std::vector<char> m_noRecompute;                   // per unit: recompute can never pay at this price
  std::vector<UnitFixed> m_fixed;                    // per unit, as advance() computed it
};

std::array<bool, 2> BlockDp::recomputeChoices(std::size_t u) const {
  const Unit& unit = m_s.m_block->units[u];
  // Recomputing a unit pays off when a later unit reads its output or it keeps something of its own;
  // the block's first unit reads the block input, which is kept anyway.
  const bool first = u == 0 && m_s.m_block->hasInput;
  const bool canRecompute = (m_s.m_lastUse[u + 1] > static_cast<int>(u) || unit.ownSaved > 0) && !first;
  std::array<bool, 2> choices{true, canRecompute};
  switch (m_w.recompute) {
    case RecomputeMode::kPerUnit: break;
    case RecomputeMode::kNone: choices[1] = false; break;
    case RecomputeMode::kFull:
      // Layer-level full recompute runs the whole forward again from the layer's input, useful or not.
      choices = {first, !first};
      break;
    case RecomputeMode::kSelective: {
      const bool attention = canRecompute && unit.kind == UnitKind::kAttention;
      choices = {!attention, attention};
      break;
    }
  }
  if (m_w.forceRecompute) {
    const int forced = m_w.forceRecompute(*m_s.m_block, u);
    if (forced >= 0) choices = {forced == 0, forced == 1};
  }
  return choices;
}

BlockDp::Inputs BlockDp::inputsOf(std::size_t u, const UnitFixed& f, std::uint64_t key) const {
  const std::size_t count = m_live[u].size();
  Inputs in;
  in.count = f.inputAt.size();
  for (std::size_t i = 0; i < in.count; ++i) {
    const std::uint64_t x = (key >> (6 * (count - 1 - f.inputAt[i]))) & 63u;  // (pack())
    in.layout[i] = static_cast<std::size_t>(x >> 1);
    in.dropped[i] = (x & 1u) != 0;
    in.share[i] = m_s.m_inputShare[u][i];
    in.bytes[i] = m_s.m_inputBytes[u][i];
    in.fwd[i] = m_s.m_convFwd[u][i].data();
    in.bwd[i] = m_s.m_convBwd[u][i].data();
    in.ops[i] = m_s.m_convOps[u][i].data();
  }
  return in;
}

void BlockDp::keptInputs(std::size_t u, std::size_t s, const Inputs& in, double memoryPrice, bool withRecompute,
                         std::array<Kept, 2>& kept) const {
  // What the unit's backward reads of its inputs, and (kept[1]) also whatever a recompute of its forward
  // reads; kept after the conversion, or (when cheaper at this price of memory) before it and converted
  // again backward, as Megatron's sequence parallelism does. An input its producer recomputes is
  // regenerated and converted into this unit's layout again.
  const BlockSolver::Hot& st = m_s.m_hot[u][s];
  const double inShare = st.inShare;
  kept = {};
  for (std::size_t i = 0; i < in.count; ++i) {
    const std::size_t l = in.layout[i];
    const double again = in.fwd[i][s][l];
    if (in.dropped[i]) {
      if (st.inputSaved > 0) kept[0].redo += again;
      kept[1].redo += again;
      continue;
    }
    const double saved = st.inputSaved * in.share[i];
    const double whole = withRecompute ? in.bytes[i] * inShare : 0.0;
    for (std::size_t r = 0; r < (withRecompute ? 2u : 1u); ++r) {
      const double after = r == 0 ? saved : std::max(saved, whole);
      if (after <= 0) continue;
      if (again > 0 && !m_s.m_partial[l] && i < 8) {  // (`before` has a bit for the first 8 inputs)
        const double smaller = after * m_s.m_share[l] / inShare;
        if (again + memoryPrice * smaller < memoryPrice * after) {
          kept[r].bytes += smaller;
          kept[r].redo += again;
          kept[r].before |= static_cast<std::uint8_t>(1u << i);
          continue;
        }
      }
      kept[r].bytes += after;
    }
  }
}

void BlockDp::leaveOutFruitlessRecompute() {
  // Against keeping it, recomputing unit u under any strategy adds at least its forward again (its own
  // inputs cost no less to keep whole; its consumers pay conversions again) and spares at most its own
  // saved bytes and what its consumers could keep of its output, at this price of memory. When the least
  // that adds exceeds the most that spares, any plan recomputing u loses to the same plan keeping it, so
  // the choice is left out and the optimum is exactly what it was (a strict inequality keeps ties).
  // Units go last to first: a consumer whose recompute is left out can keep only what its backward reads
  // of the input, not the whole input a recompute of its own would need. Free memory leaves out every
  // recompute of a unit with a forward to run.
  m_noRecompute.assign(m_n, 0);
  if (m_w.recompute != RecomputeMode::kPerUnit || m_w.forceRecompute) return;
  const double price = m_w.lambda * m_w.activationCopies;
  const auto& units = m_s.m_block->units;
  std::vector<double> spared(m_n, 0.0);  // per unit: the most its consumers can keep of its output
  for (std::size_t c = m_n; c-- > 0;) {
    const auto choices = recomputeChoices(c);
    double leastExtra = kInf;
    const auto& strategies = m_s.m_strategies[c];
    for (const auto& st : strategies) {
      if (m_w.allow && !m_w.allow(*m_s.m_block, c, st)) continue;
      leastExtra = std::min(leastExtra, st.fwd + st.commFwd - price * st.ownSaved);
    }
    const bool mayRecompute = choices[1] && !(choices[0] && leastExtra - price * spared[c] > 0);
    m_noRecompute[c] = mayRecompute ? 0 : 1;
    for (std::size_t i = 0; i < units[c].inputs.size(); ++i) {
      const int producer = units[c].inputs[i];
      if (producer >= 0) spared[static_cast<std::size_t>(producer)] += m_s.m_inputKept[c][i][mayRecompute ? 1 : 0];
    }
  }
}

BlockDp::UnitFixed BlockDp::unitFixed(std::size_t u) const {
  const Unit& unit = m_s.m_block->units[u];
  const auto& strategies = m_s.m_strategies[u];
  UnitFixed f;
  const auto& before = m_live[u];
  for (const int input : unit.inputs) {
    f.inputAt.push_back(static_cast<std::size_t>(std::find(before.begin(), before.end(), input + 1) - before.begin()));
  }
  f.choices = recomputeChoices(u);
  f.allowed.assign(strategies.size(), 1);
  f.sync.assign(strategies.size(), 0.0);
  f.state.assign(strategies.size(), 0.0);
  f.stateCost.assign(strategies.size(), 0.0);
  for (std::size_t s = 0; s < strategies.size(); ++s) {
    const Strategy& st = strategies[s];
    f.allowed[s] = !m_w.allow || m_w.allow(*m_s.m_block, u, st);
    f.sync[s] = m_s.m_syncSeconds[u][s] * m_w.syncExposed / m_w.microBatches;
    f.state[s] = st.stateParams * (m_w.stateBytesPerParam + m_w.optimizerBytesPerParam / optimizerSplit(st));
    f.stateCost[s] = m_w.lambda * f.state[s];
  }
  f.memoryPrice = m_w.lambda * m_w.activationCopies;
  f.outputBit = bitMatters(static_cast<int>(u) + 1, u + 1);
  if (m_noRecompute[u]) f.choices[1] = false;
  return f;
}

bool BlockDp::conversions(const Inputs& in, std::size_t s, Conversions& c) {
  c = {};
  for (std::size_t i = 0; i < in.count; ++i) {
    const std::size_t l = in.layout[i];
    c.fwd += in.fwd[i][s][l];
    c.bwd += in.bwd[i][s][l];
    c.ops += in.ops[i][s][l];
  }
  return std::isfinite(c.fwd) && std::isfinite(c.bwd);
}

BlockDp::Time BlockDp::timeOf(std::size_t u, const UnitFixed& f, std::size_t s, bool recompute, const Conversions& conv,
                              const Kept& kept) const {
  const BlockSolver::Hot& st = m_s.m_hot[u][s];
  Time t;
  t.recompute = kept.redo + (recompute ? st.fwdAgain + conv.fwd : 0.0);
  t.activation = kept.bytes + (recompute ? 0.0 : st.ownSaved);
  t.comm = st.commBoth + conv.fwd + conv.bwd;
  t.seconds = st.fwdBwd + t.comm + f.sync[s] + t.recompute;
  return t;
}

void BlockDp::describe(std::size_t u, const UnitFixed& f, std::size_t s, bool recompute, const Conversions& conv, const Kept& kept,
                       Option& o) const {
  const Time t = timeOf(u, f, s, recompute, conv, kept);
  o.seconds = t.seconds;
  o.stateCost = f.stateCost[s];
  o.price = f.memoryPrice * t.activation;
  o.cost = t.seconds + o.stateCost + o.price;
  o.strategy = static_cast<std::int32_t>(s);
  o.recompute = recompute;
  o.keepBefore = kept.before;
  o.outCode = static_cast<std::uint8_t>(m_s.m_hot[u][s].outCode | (recompute && f.outputBit ? 1 : 0));
}

BlockDp::Step BlockDp::stepOf(std::size_t u, const UnitFixed& f, std::size_t s, bool recompute, const Conversions& conv,
                              const Kept& kept) const {
  const Strategy& st = m_s.m_strategies[u][s];
  const Time t = timeOf(u, f, s, recompute, conv, kept);
  Step step;
  step.seconds = t.seconds;
  step.recompute = t.recompute;
  step.comm = t.comm;
  step.activation = t.activation;
  step.state = f.state[s];
  step.optimizer = st.stateParams / optimizerSplit(st);
  step.forward = st.fwd + st.commFwd + conv.fwd;
  // Collectives of conversions are counted once each way (half of both directions' count each).
  step.opsFwd = st.opsFwd + conv.ops / 2;
  step.opsBwd = st.opsBwd + conv.ops / 2;
  step.opsRec = recompute ? st.opsFwd + conv.ops / 2 : 0.0;
  return step;
}

void BlockDp::options(std::size_t u, const UnitFixed& f, const Inputs& in, std::vector<Option>& out) const {
  // Every (strategy, recompute) choice of the unit given its inputs' layouts and recompute bits; of the
  // choices that leave the same output code only the cheapest (the first on a tie) can win, since they
  // extend the same state into the same next state.
  const auto& strategies = m_s.m_strategies[u];
  const std::size_t first = out.size();
  std::array<int, 2 * kLayouts> byCode;  // output code -> its option's place in `out`
  byCode.fill(-1);
  std::array<Kept, 2> keptBoth;
  Conversions conv;
  Option candidate;
  for (std::size_t s = 0; s < strategies.size(); ++s) {
    if (!f.allowed[s] || !conversions(in, s, conv)) continue;
    keptInputs(u, s, in, f.memoryPrice, f.choices[1], keptBoth);
    for (int r = 0; r < 2; ++r) {
      if (!f.choices[static_cast<std::size_t>(r)]) continue;
      describe(u, f, s, r == 1, conv, keptBoth[static_cast<std::size_t>(r)], candidate);
      int& at = byCode[static_cast<std::size_t>(candidate.outCode)];
      if (at < 0) {
        at = static_cast<int>(out.size() - first);
        out.push_back(candidate);
      } else if (Option& o = out[first + static_cast<std::size_t>(at)]; candidate.cost < o.cost) {
        o = candidate;
      }
    }
  }
}

void BlockDp::advance(std::size_t u) {
  const auto& before = m_live[u];
  if (m_fixed.size() != m_n) m_fixed.resize(m_n);
  m_fixed[u] = unitFixed(u);
  const UnitFixed& f = m_fixed[u];
  auto& out = m_steps[u + 1];
  out.reserve(m_steps[u].size() * 2);
  const bool producesLive = m_s.m_lastUse[u + 1] > static_cast<int>(u);
  // A key holds the entry code, then 6 bits per live tensor (its layout and recompute bit; pack()).
  // What carries over to the next step is read off the key: the tensors that stay live, each with its
  // recompute bit kept only while it still matters.
  const std::size_t count = before.size();
  auto field = [count](std::uint64_t key, std::size_t i) { return (key >> (6 * (count - 1 - i))) & 63u; };
  std::array<bool, 16> stays{}, bitStays{};
  for (std::size_t i = 0; i < count; ++i) {
    const int t = before[i];
    stays[i] = m_s.m_lastUse[static_cast<std::size_t>(t)] > static_cast<int>(u);
    bitStays[i] = bitMatters(t, u + 1);
  }
  auto survivorsOf = [&](std::uint64_t key) {
    std::uint64_t next = key >> (6 * count);  // the entry code
    for (std::size_t i = 0; i < count; ++i) {
      if (!stays[i]) continue;
      const std::uint64_t x = field(key, i);
      next = (next << 6) | (bitStays[i] ? x : x & ~std::uint64_t{1});
    }
    return next;
  };
  // The choices depend on the state only through the unit's inputs (its signature): where states share
  // signatures they are computed once per signature, else once per state.
  auto signatureOf = [&](std::uint64_t key) {
    std::uint64_t sig = 0;
    for (const std::size_t at : f.inputAt) sig = (sig << 6) | field(key, at);
    return sig;
  };
  // -> [begin, end) in `pool` (its buckets reused from step to step)
  thread_local std::unordered_map<std::uint64_t, std::pair<std::size_t, std::size_t>> bySignature;
  bySignature.clear();
  for (const auto& item : m_steps[u]) bySignature.try_emplace(signatureOf(item.first));
  const bool share = bySignature.size() * 2 <= m_steps[u].size();
  thread_local std::vector<Option> pool;  // (its memory reused from step to step)
  pool.clear();
  // The next states by what survives of a state (its group) and then by the choice's output code, so a
  // choice finds its next state by index; only a new next state is hashed into `out`. States join `out`
  // in the same order as through its hash index alone, so ties break as they always have.
  constexpr std::size_t kCodes = 64;                 // 6 bits: layout and recompute bit
  thread_local StateMap<std::int32_t> groups;        // survivors -> group
  thread_local std::vector<std::int32_t> placeOf;    // per group and output code: the next state's place in `out`, or -1
  groups.clear();
  placeOf.clear();
  if (out.size() != 0) throw std::logic_error("autoparallel solver: step " + std::to_string(u + 1) + " advanced twice");
  for (const auto& [key, entry] : m_steps[u]) {
    const std::uint64_t survivors = survivorsOf(key);
    auto [group, newGroup] = groups.tryEmplace(survivors);
    if (newGroup) {
      *group = static_cast<std::int32_t>(groups.size() - 1);
      placeOf.resize(placeOf.size() + kCodes, -1);
    }
    std::int32_t* places = &placeOf[static_cast<std::size_t>(*group) * kCodes];
    std::pair<std::size_t, std::size_t> range;
    if (share) {
      auto& cached = bySignature[signatureOf(key)];
      if (cached.second == 0) {
        cached.first = pool.size();
        options(u, f, inputsOf(u, f, key), pool);
        cached.second = pool.size() + 1;  // one past, so that no choice reads as not computed
      }
      range = {cached.first, cached.second - 1};
    } else {
      pool.clear();
      options(u, f, inputsOf(u, f, key), pool);
      range = {0, pool.size()};
    }
    for (std::size_t i = range.first; i < range.second; ++i) {
      const Option& o = pool[i];
      // Summed in the order the objective has always been summed, so ties break as they did.
      const double objective = entry.objective + o.seconds + o.stateCost + o.price;
      std::int32_t& place = places[producesLive ? static_cast<std::size_t>(o.outCode) : 0];
      Entry* slot = nullptr;
      if (place < 0) {
        place = static_cast<std::int32_t>(out.size());
        slot = out.tryEmplace(producesLive ? (survivors << 6) | static_cast<std::uint64_t>(o.outCode) : survivors).first;
      } else {
        slot = &out.valueAt(static_cast<std::size_t>(place));
        if (slot->objective <= objective) continue;
      }
      *slot = {objective, key, static_cast<std::int32_t>(o.strategy), o.recompute, o.keepBefore};
    }
  }
  prune(out);
}

void BlockDp::extend(Totals& t, const Strategy& st, const Step& step) {
  t.seconds += step.seconds;
  t.compute = t.compute + st.fwd + st.bwd;  // summed as before, left to right
  t.comm += step.comm;
  t.recompute += step.recompute;
  t.activation += step.activation;
  t.state += step.state;
  t.params += st.stateParams;
  t.optimizer += step.optimizer;
  t.forward += step.forward;
  t.opsFwd += step.opsFwd;
  t.opsBwd += step.opsBwd;
  t.opsRec += step.opsRec;
  for (int k = 0; k < 3; ++k) t.sync[k] += st.syncBytes[k];
}

Totals BlockDp::totalsOf(std::size_t from, std::size_t to, const BlockPlan& plan, const std::vector<std::uint64_t>& stateAt) const {
  // Each unit's choice described again (stepOf) from the state it was made in, from the figures options() compared.
  Totals t;
  std::array<Kept, 2> keptBoth;
  Conversions conv;
  for (std::size_t u = from; u < to; ++u) {
    const UnitFixed& f = m_fixed[u];
    const Inputs in = inputsOf(u, f, stateAt[u]);
    const auto s = static_cast<std::size_t>(plan.units[u].strategy);
    if (!conversions(in, s, conv)) throw std::logic_error("autoparallel solver: a chosen conversion of " + m_s.m_block->name);
    keptInputs(u, s, in, f.memoryPrice, f.choices[1], keptBoth);
    const bool recompute = plan.units[u].recompute;
    extend(t, m_s.m_strategies[u][s], stepOf(u, f, s, recompute, conv, keptBoth[recompute ? 1 : 0]));
  }
  return t;
}

void BlockDp::prune(StateMap<Entry>& states) {
  if (states.size() <= kBeam) return;
  std::vector<std::pair<double, std::uint64_t>> order;
  for (const auto& [k, e] : states) order.push_back({e.objective, k});
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kBeam), order.end());
  StateMap<Entry> kept;
  kept.reserve(kBeam);
  for (std::size_t i = 0; i < kBeam; ++i) *kept.tryEmplace(order[i].second).first = states.at(order[i].second);
  states = std::move(kept);
}

void BlockDp::cut(std::size_t k) {
  auto& reached = m_reached[k];
  reached = std::move(m_steps[k]);
  m_steps[k].clear();
  std::vector<std::pair<int, bool>> state;
  for (const auto& [key, entry] : reached) {
    int code = 0;
    unpack(key, 1, code, state);
    Entry fresh;
    fresh.objective = 0;
    auto [slot, inserted] = m_steps[k].tryEmplace(pack(state[0].first * 2 + (state[0].second ? 1 : 0), state));
    if (inserted) *slot = fresh;
  }
  m_cuts.push_back(k);
}

void BlockDp::walkBack(std::size_t from, std::size_t to, std::uint64_t key, bool atCut, BlockPlan& plan,
                       std::vector<std::uint64_t>& stateAt) const {
  // Units from-1 down to `to`; the state at `from` is in m_reached when `from` is a cut the walk ends at.
  std::uint64_t at = key;
  for (std::size_t u = from; u-- > to;) {
    const Entry& e = (u + 1 == from && atCut) ? m_reached.at(from).at(at) : m_steps[u + 1].at(at);
    UnitChoice& c = plan.units[u];
    c.strategy = e.strategy;
    c.recompute = e.recompute_;
    const std::size_t inputs = m_s.m_block->units[u].inputs.size();
    c.keepBeforeConversion.assign(inputs, false);
    for (std::size_t i = 0; i < inputs; ++i) c.keepBeforeConversion[i] = ((e.keepBefore >> i) & 1u) != 0;
    at = e.previous;
    stateAt[u] = at;
  }
}

namespace {

Totals sum(Totals a, const Totals& b) {
  a.seconds += b.seconds;
  a.compute += b.compute;
  a.comm += b.comm;
  a.recompute += b.recompute;
  a.activation += b.activation;
  a.state += b.state;
  a.params += b.params;
  a.optimizer += b.optimizer;
  a.forward += b.forward;
  a.opsFwd += b.opsFwd;
  a.opsBwd += b.opsBwd;
  a.opsRec += b.opsRec;
  for (int k = 0; k < 3; ++k) a.sync[k] += b.sync[k];
  return a;
}

}  // namespace

std::vector<std::vector<BlockDp::Prefix>> BlockDp::joinCuts() const {
  // For each original entry and the state at each cut, the best way there.
  std::vector<std::vector<Prefix>> prefixes(m_cuts.size());
  std::vector<std::vector<std::size_t>> byCode;  // prefixes of the previous cut by their cut code
  std::vector<std::pair<int, bool>> state;
  // (entry, cut code) -> its best prefix, in a flat table of places in `found`; listed in key order.
  constexpr std::size_t kCodes = 2 * kLayouts;
  std::vector<int> place(kCodes * kCodes, -1);
  std::vector<Prefix> found;
  for (std::size_t j = 0; j < m_cuts.size(); ++j) {
    found.clear();
    std::fill(place.begin(), place.end(), -1);
    auto slot = [&](int entry, int z) -> std::pair<Prefix*, bool> {
      int& at = place[static_cast<std::size_t>(entry) * kCodes + static_cast<std::size_t>(z)];
      if (at >= 0) return {&found[static_cast<std::size_t>(at)], false};
      at = static_cast<int>(found.size());
      return {&found.emplace_back(), true};
    };
    if (j > 0) byCode = indexByCode(prefixes[j - 1]);
    for (const auto& [key, e] : m_reached.at(m_cuts[j])) {
      int code = 0;
      unpack(key, 1, code, state);
      const int z = state[0].first * 2 + (state[0].second ? 1 : 0);
      if (j == 0) {
        auto [it, inserted] = slot(code, z);
        if (inserted || e.objective < it->objective) *it = {e.objective, key, -1, code, z};
        continue;
      }
      // This segment's states carry the previous cut's code as their entry code.
      for (const auto p : byCode[static_cast<std::size_t>(code)]) {
        const Prefix& before = prefixes[j - 1][p];
        const double objective = before.objective + e.objective;
        auto [it, inserted] = slot(before.entry, z);
        if (inserted || objective < it->objective) *it = {objective, key, static_cast<std::int64_t>(p), before.entry, z};
      }
    }
    for (std::size_t k = 0; k < place.size(); ++k) {
      if (place[k] >= 0) prefixes[j].push_back(found[static_cast<std::size_t>(place[k])]);
    }
  }
  return prefixes;
}

std::vector<std::vector<std::size_t>> BlockDp::indexByCode(const std::vector<Prefix>& list) {
  std::vector<std::vector<std::size_t>> byCode(2 * kLayouts);
  for (std::size_t p = 0; p < list.size(); ++p) byCode[static_cast<std::size_t>(list[p].z)].push_back(p);
  return byCode;
}

std::vector<BlockPlan> BlockDp::finish(const BlockSolver::ExitCost& exitCost) {
  const auto prefixes = joinCuts();
  // Final states, joined with the last cut's prefixes; one plan per (entry, exit).
  const auto& finalLive = m_live[m_n];
  const auto byCode = m_cuts.empty() ? std::vector<std::vector<std::size_t>>{} : indexByCode(prefixes.back());
  // (entry, exit) -> the best way through, in a flat table of places in `found`; planned in key order.
  std::vector<int> place(static_cast<std::size_t>(kLayouts * kLayouts), -1);
  std::vector<std::tuple<double, std::uint64_t, std::int64_t>> found;  // objective, final key, prefix
  auto slot = [&](int entry, int exit) -> std::pair<std::tuple<double, std::uint64_t, std::int64_t>*, bool> {
    int& at = place[static_cast<std::size_t>(entry * kLayouts + exit)];
    if (at >= 0) return {&found[static_cast<std::size_t>(at)], false};
    at = static_cast<int>(found.size());
    return {&found.emplace_back(), true};
  };
  std::vector<std::pair<int, bool>> state;
  for (const auto& [key, e] : m_steps[m_n]) {
    int code = 0;
    unpack(key, finalLive.size(), code, state);
    const int exit = finalLive.empty() ? 0 : state.back().first;
    if (m_cuts.empty()) {
      auto [it, inserted] = slot(code / 2, exit);
      if (inserted || e.objective < std::get<0>(*it)) *it = {e.objective, key, -1};
      continue;
    }
    const auto& last = prefixes.back();
    for (const auto p : byCode[static_cast<std::size_t>(code)]) {
      const double objective = last[p].objective + e.objective;
      auto [it, inserted] = slot(last[p].entry / 2, exit);
      if (inserted || objective < std::get<0>(*it)) *it = {objective, key, static_cast<std::int64_t>(p)};
    }
  }
  // With an exit cost, each entry's least sum (the first on a tie, in exit order) is the one planned.
  if (exitCost) {
    for (int entry = 0; entry < kLayouts; ++entry) {
      double least = kInf;
      int chosen = -1;
      for (int exit = 0; exit < kLayouts; ++exit) {
        const int at = place[static_cast<std::size_t>(entry * kLayouts + exit)];
        if (at < 0) continue;
        const double sum = std::get<0>(found[static_cast<std::size_t>(at)]) + exitCost(Layout::fromIndex(entry), Layout::fromIndex(exit));
        if (sum < least) {
          least = sum;
          chosen = exit;
        }
      }
      for (int exit = 0; exit < kLayouts; ++exit) {
        if (exit != chosen) place[static_cast<std::size_t>(entry * kLayouts + exit)] = -1;
      }
    }
  }
  std::vector<BlockPlan> plans;
  for (std::size_t k = 0; k < place.size(); ++k) {
    if (place[k] < 0) continue;
    const auto& [objective, key, prefix] = found[static_cast<std::size_t>(place[k])];
    const int entry = static_cast<int>(k) / kLayouts, exit = static_cast<int>(k) % kLayouts;
    plans.push_back(planOf(Layout::fromIndex(entry), Layout::fromIndex(exit), objective, key, prefix, prefixes));
  }
  return plans;
}

BlockPlan BlockDp::planOf(Layout entry, Layout exit, double objective, std::uint64_t key, std::int64_t prefix,
                          const std::vector<std::vector<Prefix>>& prefixes) const {
  BlockPlan plan;
  plan.entry = entry;
  plan.exit = exit;
  plan.objective = objective;
  plan.units.resize(m_n);
  // The last segment, then each earlier one through the prefix chain.
  std::vector<std::uint64_t> stateAt(m_n, 0);
  std::size_t end = m_n;
  std::uint64_t at = key;
  bool atCut = false;
  std::int64_t p = prefix;
  for (std::size_t j = m_cuts.size(); j-- > 0;) {
    walkBack(end, m_cuts[j], at, atCut, plan, stateAt);
    const Prefix& pre = prefixes[j][static_cast<std::size_t>(p)];
    end = m_cuts[j];
    at = pre.reachedKey;
    atCut = true;
    p = pre.previous;
  }
  walkBack(end, 0, at, atCut, plan, stateAt);
  // The sums segment by segment, each from zero, joined first to last as the cuts join them.
  Totals e;
  std::size_t begin = 0;
  for (std::size_t j = 0; j <= m_cuts.size(); ++j) {
    const std::size_t stop = j < m_cuts.size() ? m_cuts[j] : m_n;
    const Totals segment = totalsOf(begin, stop, plan, stateAt);
    e = j == 0 ? segment : sum(e, segment);
    begin = stop;
  }
  plan.seconds = e.seconds;
  plan.computeSeconds = e.compute;
  plan.commSeconds = e.comm;
  plan.recomputeSeconds = e.recompute;
  plan.activationBytes = e.activation;
  plan.stateBytes = e.state;
  plan.params = e.params;
  plan.optimizerParams = e.optimizer;
  plan.forwardSeconds = e.forward;
  plan.opsForward = e.opsFwd;
  plan.opsBackward = e.opsBwd;
  plan.opsRecompute = e.opsRec;
  for (int k = 0; k < 3; ++k) plan.syncBytes[k] = e.sync[k];
  return plan;
}

std::vector<BlockPlan> BlockSolver::solve(const std::vector<Layout>& entries, const SolveWeights& weights, const ExitCost& exitCost) const {
  BlockDp dp(*this, weights);
  return dp.run(entries, exitCost);
}

}  // namespace colo::planner::detail
