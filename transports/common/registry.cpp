#include "arcoll/error.hpp"
#include "transports/transport.hpp"

namespace arcoll {

TransportRegistry& TransportRegistry::instance() {
  static TransportRegistry registry;
  return registry;
}

void TransportRegistry::add(TransportInfo info) {
  std::string name = info.name;
  if (!transports_.emplace(name, std::move(info)).second)
    throw InternalError("transport registry", "transport '" + name + "' registered twice");
}

const TransportInfo* TransportRegistry::find(const std::string& name) const {
  auto it = transports_.find(name);
  return it == transports_.end() ? nullptr : &it->second;
}

std::vector<std::string> TransportRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : transports_) out.push_back(name);
  return out;
}

}  // namespace arcoll
