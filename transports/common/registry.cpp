#include "arcoll/error.hpp"
#include "transports/transport.hpp"

namespace arcoll {

const TransportInfo& transport_for(bool same_host, const std::string& forced) {
  const TransportRegistry& registry = TransportRegistry::instance();
  if (forced != "auto") {
    if (const TransportInfo* info = registry.find(forced)) return *info;
    throw InvalidArgument("communicator", "unknown transport '" + forced +
                                              "' (known: auto, " + registry.name_list() + ")");
  }
  const TransportInfo* best = nullptr;
  for (const TransportInfo* info : registry.all())
    if ((same_host || info->reach == Reach::any_host) && (!info->available || info->available()) &&
        (best == nullptr || info->preference > best->preference))
      best = info;
  if (best == nullptr)
    throw InternalError("communicator", "no transport registered reaches ranks on " +
                                            std::string(same_host ? "one host" : "other hosts"));
  return *best;
}

}  // namespace arcoll
