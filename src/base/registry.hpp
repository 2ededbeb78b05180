// Things that register themselves by name when the program starts (algorithms, transports,
// replay models, arbench backends): every list and lookup comes from their registry, so adding
// one is its file (or folder) and its registration line, never a switch statement elsewhere.
//
// Info is a struct with a `name` member and a `static constexpr const char* kKind` ("algorithm")
// for error messages.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "arcoll/error.hpp"

namespace arcoll {

template <class Info>
class Registry {
 public:
  static Registry& instance() {
    static Registry registry;
    return registry;
  }

  void add(Info info) {
    std::string name = info.name;
    if (!entries_.emplace(name, std::move(info)).second)
      throw InternalError(std::string(Info::kKind) + " registry",
                          std::string(Info::kKind) + " '" + name + "' registered twice");
  }
  // nullptr when nothing of that name registered.
  const Info* find(std::string_view name) const {
    const auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }
  // In name order.
  std::vector<const Info*> all() const {
    std::vector<const Info*> out;
    for (const auto& [name, info] : entries_) out.push_back(&info);
    return out;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, info] : entries_) out.push_back(name);
    return out;
  }
  // The position of `name` in all(), -1 when unknown.
  int index_of(std::string_view name) const {
    int index = 0;
    for (const auto& [known, info] : entries_) {
      if (known == name) return index;
      ++index;
    }
    return -1;
  }
  // "a, b, c": the known names, for messages.
  std::string name_list() const {
    std::string text;
    for (const auto& [name, info] : entries_) text += (text.empty() ? "" : ", ") + name;
    return text;
  }

 private:
  std::map<std::string, Info, std::less<>> entries_;
};

// `const Registrar<FooInfo> kRegistration{{"name", ...}};` at namespace scope registers it.
template <class Info>
struct Registrar {
  explicit Registrar(Info info) { Registry<Info>::instance().add(std::move(info)); }
};

}  // namespace arcoll
