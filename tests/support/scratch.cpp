#include "tests/support/scratch.hpp"

#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace arcoll::testing {

ScratchFolder::ScratchFolder(const std::string& prefix) {
  std::string name = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(name.data()) == nullptr)
    throw std::runtime_error("cannot make a folder like " + name);
  path_ = name;
}

ScratchFolder::~ScratchFolder() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

bool came_within(const char* path, int seconds) {
  for (int polls = 0; polls < seconds * 100; ++polls) {
    if (::access(path, F_OK) == 0) return true;
    ::poll(nullptr, 0, 10);
  }
  return false;
}

void mark(const std::string& path, const std::string& text) {
  // Written aside, then renamed: whoever sees the mark sees all of its text.
  const std::string aside = path + ".part";
  std::FILE* file = std::fopen(aside.c_str(), "w");
  if (file == nullptr) return;
  const bool written = std::fputs(text.c_str(), file) >= 0;
  if (std::fclose(file) == 0 && written) std::rename(aside.c_str(), path.c_str());
}

}  // namespace arcoll::testing
