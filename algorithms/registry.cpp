#include <cstring>
#include <iterator>

#include "algorithms/algorithm.hpp"
#include "arcoll/error.hpp"

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
  }
  return "?";
}

bool allreduce_is_local(const PointToPoint& p2p, const CollectiveArgs& args) {
  if (p2p.size() > 1 && args.count > 0) return false;
  if (args.recv != args.send && args.count != 0)
    std::memmove(args.recv, args.send, args.count * size_of(args.type));
  return true;
}

AlgorithmRegistry& AlgorithmRegistry::instance() {
  static AlgorithmRegistry registry;
  return registry;
}

void AlgorithmRegistry::add(AlgorithmInfo info) {
  std::string name = info.name;
  if (!algorithms_.emplace(name, std::move(info)).second)
    throw InternalError("algorithm registry", "algorithm '" + name + "' registered twice");
}

const CollectiveFn* AlgorithmRegistry::find(const std::string& name, Collective collective) const {
  auto it = algorithms_.find(name);
  if (it == algorithms_.end()) return nullptr;
  auto fn = it->second.implementations.find(collective);
  return fn == it->second.implementations.end() ? nullptr : &fn->second;
}

std::vector<std::string> AlgorithmRegistry::names(Collective collective) const {
  std::vector<std::string> out;
  for (const auto& [name, info] : algorithms_)
    if (info.implementations.count(collective) != 0) out.push_back(name);
  return out;
}

int AlgorithmRegistry::index_of(const std::string& name) const {
  const auto it = algorithms_.find(name);
  return it == algorithms_.end() ? -1 : static_cast<int>(std::distance(algorithms_.begin(), it));
}

std::vector<const AlgorithmInfo*> AlgorithmRegistry::all() const {
  std::vector<const AlgorithmInfo*> out;
  for (const auto& [name, info] : algorithms_) out.push_back(&info);
  return out;
}

}  // namespace arcoll
