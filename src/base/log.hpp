// Diagnostics on stderr, one line each, prefixed so they stand out among a rank's output.
// ARCOLL_LOG=debug shows debug lines too.
#pragma once

#include <string>

namespace arcoll::log {

void set_rank(int rank);  // shown in every line once known
void debug(const std::string& message);
void warn(const std::string& message);
void error(const std::string& message);

}  // namespace arcoll::log
