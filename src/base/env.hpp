// Reading the process environment.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace arcoll::env {

// The variable's value, or nullopt when unset or empty.
std::optional<std::string> get(const char* name);
// Integer value; ConfigurationError naming the variable when it is not an integer.
std::optional<long long> get_int(const char* name);
// "NAME=value" of the set variables whose names begin with one of `prefixes`, sorted, one per
// line.
std::string with_prefixes(const std::vector<std::string>& prefixes);

}  // namespace arcoll::env
