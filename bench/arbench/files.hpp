// Result files: checked before a run starts, written whole or not at all.
#pragma once

#include <optional>
#include <string>

namespace arbench {

// An error message naming `flag` when `path` cannot be written (its directory is missing or
// not writable, or it is a directory); nullopt when it can.
std::optional<std::string> check_writable(const std::string& flag, const std::string& path);
// Writes `content` to `path` through a temporary file in the same directory and a rename, so
// that readers never see half a file. Throws std::runtime_error naming the file.
void write_atomically(const std::string& path, const std::string& content);

}  // namespace arbench
