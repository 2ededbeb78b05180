#include <cstring>

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

bool allreduce_is_local(const PointToPoint& p2p, const CollectiveArgs& args) {
  if (p2p.size() > 1 && args.count > 0) return false;
  if (args.recv != args.send && args.count != 0)
    std::memmove(args.recv, args.send, args.count * size_of(args.type));
  return true;
}

const CollectiveFn* find_collective(std::string_view name, Collective collective) {
  const AlgorithmInfo* info = AlgorithmRegistry::instance().find(name);
  if (info == nullptr) return nullptr;
  const auto fn = info->implementations.find(collective);
  return fn == info->implementations.end() ? nullptr : &fn->second;
}

std::vector<std::string> algorithm_names(Collective collective) {
  std::vector<std::string> out;
  for (const AlgorithmInfo* info : AlgorithmRegistry::instance().all())
    if (info->implementations.count(collective) != 0) out.push_back(info->name);
  return out;
}

}  // namespace arcoll
