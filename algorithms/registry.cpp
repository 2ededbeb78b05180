
#include "algorithms/algorithm.hpp"

namespace arcoll {

std::string_view to_string(Collective collective) {
  switch (collective) {
    case Collective::allreduce:
      return "allreduce";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::allgather:
      return "allgather";
    case Collective::broadcast:
      return "broadcast";
    case Collective::barrier:
      return "barrier";
    case Collective::reduce:
      return "reduce";
    case Collective::gather:
      return "gather";
    case Collective::scatter:
      return "scatter";
    case Collective::alltoall:
      return "alltoall";
    case Collective::alltoallv:
      return "alltoallv";
  }
  return "?";
}

std::optional<Collective> parse_collective(std::string_view name) {
  for (auto c = static_cast<std::uint8_t>(Collective::allreduce);
       c <= static_cast<std::uint8_t>(Collective::alltoallv); ++c)
    if (to_string(static_cast<Collective>(c)) == name) return static_cast<Collective>(c);
  return std::nullopt;
}

bool allreduce_is_local(PointToPoint& p2p, const CollectiveArgs& args) {
  if (p2p.size() > 1 && args.count > 0) return false;
  p2p.copy(args.recv, args.send, args.count * size_of(args.type));
  return true;
}

const CollectiveFn* find_collective(std::string_view name, Collective collective) {
  const AlgorithmInfo* info = AlgorithmRegistry::instance().find(name);
  if (info == nullptr) return nullptr;
  const auto fn = info->implementations.find(collective);
  return fn == info->implementations.end() ? nullptr : &fn->second;
}

std::vector<std::string> algorithm_names(Collective collective, bool with_cost) {
  std::vector<std::string> out;
  for (const AlgorithmInfo* info : AlgorithmRegistry::instance().all())
    if (info->implementations.count(collective) != 0 &&
        (!with_cost || info->costs.count(collective) != 0))
      out.push_back(info->name);
  return out;
}

}  // namespace arcoll
