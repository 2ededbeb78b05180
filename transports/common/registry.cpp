#include <algorithm>

#include "arcoll/error.hpp"
#include "transports/transport.hpp"

namespace arcoll {

namespace {

// The part of `choice` for pairs of one host or across hosts: "WITHIN+ACROSS" split, or the
// whole.
std::string part_for(bool same_host, const std::string& choice) {
  const std::size_t plus = choice.find('+');
  if (plus == std::string::npos) return choice;
  return same_host ? choice.substr(0, plus) : choice.substr(plus + 1);
}

const TransportInfo* most_preferred(bool same_host) {
  const TransportInfo* best = nullptr;
  for (const TransportInfo* info : TransportRegistry::instance().all())
    if ((same_host || info->reach == Reach::any_host) && (!info->available || info->available()) &&
        (best == nullptr || info->preference > best->preference))
      best = info;
  return best;
}

}  // namespace

std::string transport_choice_problem(const std::string& choice) {
  const TransportRegistry& registry = TransportRegistry::instance();
  if (std::count(choice.begin(), choice.end(), '+') > 1)
    return "transport '" + choice +
           "': at most one '+', between the transport within hosts and the one across them";
  for (const bool same_host : {true, false}) {
    const std::string name = part_for(same_host, choice);
    if (name == "auto") continue;
    const TransportInfo* info = registry.find(name);
    if (info == nullptr)
      return "unknown transport '" + name + "' (known: auto, " + registry.name_list() +
             "; WITHIN+ACROSS names the transport within hosts and the one across them)";
    if (!same_host && info->reach != Reach::any_host && choice.find('+') != std::string::npos)
      return "transport '" + choice + "': " + name +
             " reaches ranks of one host only, and cannot carry the pairs across hosts";
  }
  return "";
}

const TransportInfo& transport_for(bool same_host, const std::string& choice) {
  if (std::string why = transport_choice_problem(choice); !why.empty())
    throw InvalidArgument("communicator", why);
  const std::string name = part_for(same_host, choice);
  if (name != "auto") return *TransportRegistry::instance().find(name);
  const TransportInfo* best = most_preferred(same_host);
  if (best == nullptr)
    throw InternalError("communicator", "no transport registered reaches ranks on " +
                                            std::string(same_host ? "one host" : "other hosts"));
  return *best;
}

}  // namespace arcoll
