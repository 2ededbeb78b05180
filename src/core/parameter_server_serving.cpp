// The parameter server's server side: the workers' headers and payloads taken in order, the
// pieces updated by the consistency model (bsp, asp, ssp), pulls answered when they may be.
#include <algorithm>

#include "src/base/reduce.hpp"
#include "src/core/parameter_server_impl.hpp"

namespace arcoll {

using namespace ps;  // the protocol's names, shared by the two halves

void ParameterServer::Impl::post_header_receive(int worker) {
  Client& c = clients_[worker];
  c.header_request = message(Request::Kind::recv, worker, &c.header, sizeof(Header), kHeaderTag);
}

void ParameterServer::Impl::handle_header(int worker) {
  Client& c = clients_[worker];
  const Header& h = c.header;
  if (h.op < static_cast<std::uint32_t>(Op::init) || h.op > static_cast<std::uint32_t>(Op::agree))
    throw ProtocolError(
        kOperation,
        "rank " + std::to_string(worker) + " sent an unknown operation " + std::to_string(h.op),
        rank_, worker);
  if (carries_payload(h)) {
    if (h.type > static_cast<std::uint32_t>(DataType::i64))
      throw ProtocolError(kOperation, "rank " + std::to_string(worker) + " sent an unknown type",
                          rank_, worker);
    const std::size_t n = piece_count(h, options_.piece_bytes);
    if (n == 0)
      throw ProtocolError(kOperation,
                          "rank " + std::to_string(worker) + " sent " + key_text(h.key, h.piece) +
                              " beyond its " + std::to_string(h.count) + " elements",
                          rank_, worker);
    c.payload.resize(n * size_of(static_cast<DataType>(h.type)));
    c.payload_request =
        message(Request::Kind::recv, worker, c.payload.data(), c.payload.size(), kPayloadTag);
    return;
  }
  c.payload.clear();
  apply(worker, h, c.payload);
}

bool ParameterServer::Impl::pull_ready(const PieceState& state, std::uint64_t clock) const {
  if (!state.has_initial) return false;
  switch (options_.consistency) {
    case Consistency::bsp:
      return clock == 0 || state.results.count(clock) > 0;
    case Consistency::asp:
      return true;
    case Consistency::ssp: {
      const std::uint64_t needed =
          clock > std::uint64_t(options_.staleness) ? clock - std::uint64_t(options_.staleness) : 0;
      for (int w : workers_) {
        auto it = state.clocks.find(w);
        if ((it == state.clocks.end() ? 0 : it->second) < needed) return false;
      }
      return true;
    }
  }
  return false;
}

std::shared_ptr<const Bytes> ParameterServer::Impl::pull_value(PieceState& state,
                                                               std::uint64_t clock) {
  if (options_.consistency == Consistency::bsp && options_.rule == ServerRule::sum && clock > 0)
    return state.results.at(clock);
  return state.value;
}

void ParameterServer::Impl::answer_pulls(std::uint64_t key, std::uint32_t piece,
                                         PieceState& state) {
  std::vector<PendingPull> waiting;
  waiting.swap(state.pending);
  for (const PendingPull& p : waiting) {
    if (pull_ready(state, p.clock))
      reply(p.worker, p.request, pull_value(state, p.clock), "pull of " + key_text(key, piece));
    else
      state.pending.push_back(p);
  }
  // bsp: a step's sum is needed until every worker has moved past it.
  if (options_.consistency == Consistency::bsp) {
    std::uint64_t slowest = ~std::uint64_t(0);
    for (int w : workers_) {
      auto it = state.clocks.find(w);
      slowest = std::min(slowest, it == state.clocks.end() ? 0 : it->second);
    }
    for (auto it = state.results.begin(); it != state.results.end() && it->first < slowest;)
      it = state.results.erase(it);
  }
}

void ParameterServer::Impl::reply(int worker, std::uint32_t request,
                                  std::shared_ptr<const Bytes> bytes, const std::string& what) {
  post(
      Request::Kind::send, worker, const_cast<char*>(bytes->data()), bytes->size(),
      kReplyTagBase + request, [] {}, what + " to rank " + std::to_string(worker), bytes);
}

void ParameterServer::Impl::apply(int worker, const Header& h, const Bytes& payload) {
  const Op op = static_cast<Op>(h.op);
  if (op == Op::finish) {
    clients_[worker].finished = true;
    return;
  }
  if (op == Op::barrier) {
    // Every worker's messages before its barrier have been applied once all have arrived.
    auto& arrived = barriers_[h.clock];
    arrived.emplace_back(worker, h.request);
    if (arrived.size() == workers_.size()) {
      for (auto [w, request] : arrived)
        reply(w, request, std::make_shared<Bytes>(sizeof(std::uint64_t)), "barrier");
      barriers_.erase(h.clock);
    }
    return;
  }
  if (op == Op::agree) {
    if (h.type > static_cast<std::uint32_t>(DataType::i64))
      throw ProtocolError(kOperation, "rank " + std::to_string(worker) + " sent an unknown type",
                          rank_, worker);
    auto& arrived = agreements_[h.clock];
    if (!arrived.empty()) {
      const auto& [first, theirs] = arrived.front();
      if (theirs.key != h.key || theirs.count != h.count || theirs.type != h.type) {
        auto registered = [](int rank, const Header& r) {
          return "rank " + std::to_string(rank) + " registers key " + std::to_string(r.key) +
                 " of " + std::to_string(r.count) + " " +
                 std::string(to_string(static_cast<DataType>(r.type)));
        };
        throw InvalidArgument("register",
                              "registration #" + std::to_string(h.clock) + ": " +
                                  registered(worker, h) + " where " + registered(first, theirs) +
                                  ": every worker must register the same keys, counts and types "
                                  "in the same order",
                              rank_, worker);
      }
    }
    arrived.emplace_back(worker, h);
    if (arrived.size() == workers_.size()) {
      for (const auto& [w, header] : arrived)
        reply(w, header.request, std::make_shared<Bytes>(sizeof(std::uint64_t)), "register");
      agreements_.erase(h.clock);
    }
    return;
  }
  const DataType type = static_cast<DataType>(h.type);
  PieceState& state = pieces_[{h.key, h.piece}];
  const std::string where = key_text(h.key, h.piece);
  if (op == Op::init) {
    const std::size_t n = piece_count(h, options_.piece_bytes);
    if (state.first_registrar < 0) {
      state.first_registrar = worker;
      state.count = n;
      state.type = type;
      state.value = std::make_shared<Bytes>(n * size_of(type), 0);
      if (options_.rule == ServerRule::sgd) state.velocity.assign(n, 0.0f);
    } else if (state.type != type || state.count != n) {
      throw InvalidArgument("register",
                            "rank " + std::to_string(worker) + " registered key " +
                                std::to_string(h.key) + " as " + std::to_string(h.count) + " " +
                                std::string(to_string(type)) + ", unlike rank " +
                                std::to_string(state.first_registrar),
                            rank_, worker);
    }
    if (worker == workers_.front()) {
      if (h.with_values) *state.value = payload;
      state.has_initial = true;
    }
    state.awaiting_init.emplace_back(worker, h.request);
    if (state.has_initial) {
      for (auto [w, request] : state.awaiting_init)
        reply(w, request, std::make_shared<Bytes>(sizeof(std::uint64_t)), "register of " + where);
      state.awaiting_init.clear();
    }
    return;
  }
  if (!state.has_initial)
    throw ProtocolError(
        op_name(op),
        "rank " + std::to_string(worker) + " used " + where + " before it was registered", rank_,
        worker);
  if (op == Op::push || op == Op::push_pull) {
    state.clocks[worker] = h.clock;
    const std::size_t n = state.count;
    if (options_.consistency == Consistency::bsp) {
      Step& step = state.steps[h.clock];
      if (!step.sum) {
        step.sum = std::make_shared<Bytes>(payload);
      } else {
        kernels::reduce(step.sum->data(), step.sum->data(), payload.data(), n, type, ReduceOp::sum);
      }
      if (++step.pushes == static_cast<int>(workers_.size())) {
        if (options_.rule == ServerRule::sgd) {
          // The weights move by the mean gradient of the step.
          auto weights = std::make_shared<Bytes>(*state.value);
          auto* w = reinterpret_cast<float*>(weights->data());
          const auto* g = reinterpret_cast<const float*>(step.sum->data());
          const float scale = 1.0f / static_cast<float>(workers_.size());
          for (std::size_t i = 0; i < n; ++i) {
            state.velocity[i] = float(options_.momentum) * state.velocity[i] + g[i] * scale;
            w[i] -= float(options_.learning_rate) * state.velocity[i];
          }
          state.value = weights;
          state.results[h.clock] = weights;
        } else {
          state.results[h.clock] = step.sum;
        }
        state.steps.erase(h.clock);
      }
    } else {
      // Replies in flight may still read the value: change a copy when they do.
      if (state.value.use_count() > 1) state.value = std::make_shared<Bytes>(*state.value);
      if (options_.rule == ServerRule::sgd) {
        auto* w = reinterpret_cast<float*>(state.value->data());
        const auto* g = reinterpret_cast<const float*>(payload.data());
        for (std::size_t i = 0; i < n; ++i) {
          state.velocity[i] = float(options_.momentum) * state.velocity[i] + g[i];
          w[i] -= float(options_.learning_rate) * state.velocity[i];
        }
      } else {
        kernels::reduce(state.value->data(), state.value->data(), payload.data(), n, type,
                        ReduceOp::sum);
      }
    }
  }
  if (op == Op::pull || op == Op::push_pull)
    state.pending.push_back({worker, h.clock, h.request, Clock::now()});
  answer_pulls(h.key, h.piece, state);
}

// A pull or registration that waits longer than the deadline names the workers it waits for.
void ParameterServer::Impl::check_stalls() {
  const auto now = Clock::now();
  for (auto& [id, state] : pieces_) {
    for (const PendingPull& p : state.pending) {
      if (now - p.since < timeout_) continue;
      std::string missing;
      for (int w : workers_) {
        auto it = state.clocks.find(w);
        const std::uint64_t clock = it == state.clocks.end() ? 0 : it->second;
        if (!pull_ready(state, p.clock) && clock < p.clock)
          missing += (missing.empty() ? "" : ", ") + std::to_string(w) + " (at push " +
                     std::to_string(clock) + ")";
      }
      throw TimeoutError(kOperation,
                         "the pull of " + key_text(id.first, id.second) + " by rank " +
                             std::to_string(p.worker) + " at push " + std::to_string(p.clock) +
                             " waited " + seconds_text(timeout_) + " for rank(s) " + missing,
                         rank_, p.worker);
    }
  }
}

}  // namespace arcoll
