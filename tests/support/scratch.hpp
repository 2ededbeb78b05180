// Scratch folders for tests, and marks passed through them between ranks, where a rank must
// wait for another without a communicator (stopped, gone, or not yet made).
#pragma once

#include <string>

namespace arcoll::testing {

// A new folder under the temporary directory, named from `prefix`, removed with all it holds
// when the test ends, however it ends.
class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& prefix);
  ~ScratchFolder();
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Whether `path` came within `seconds`; async-signal-safe calls only, as a child forked from a
// process with threads may make.
bool came_within(const char* path, int seconds);

// Makes `path` with `text` in it. A mark that cannot be made is never seen: the rank waiting
// for it fails at its deadline.
void mark(const std::string& path, const std::string& text = "");

}  // namespace arcoll::testing
