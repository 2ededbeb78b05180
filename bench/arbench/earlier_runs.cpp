#include "arbench/earlier_runs.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "arbench/files.hpp"
#include "arcoll/tuning.hpp"

namespace arbench {
namespace {

constexpr const char* kHeading = "arbench first runs on ";
constexpr const char* kRunLine = "run";
constexpr const char* kPrefix = "first-runs-";
// Files of other commits kept beside the current one: a few, so that going back to a commit
// finds its history, without a file per commit ever built.
constexpr std::size_t kKeptFiles = 8;

std::string heading(const RunInfo& info) { return kHeading + info.host.cpu_model; }

// The runs in `in`, after its heading; a line that cannot be read is left out with a warning.
std::vector<std::vector<KeptRatio>> parse_runs(std::istream& in, const std::string& path) {
  std::vector<std::vector<KeptRatio>> runs;
  std::string line;
  for (int number = 2; std::getline(in, line); ++number) {
    if (line == kRunLine) {
      runs.emplace_back();
      continue;
    }
    std::istringstream fields(line);
    KeptRatio r;
    std::string rest;
    if (runs.empty() || !(fields >> r.peer >> r.coll >> r.size_bytes >> r.value) ||
        (fields >> rest) || !(r.value > 0)) {
      std::fprintf(stderr, "arbench: warning: %s: line %d cannot be read; it is left out\n",
                   path.c_str(), number);
      continue;
    }
    runs.back().push_back(r);
  }
  return runs;
}

// Leaves the kKeptFiles most recently written first-run files of the folder.
void prune(const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  std::vector<fs::directory_entry> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec))
    if (entry.is_regular_file(ec) && entry.path().filename().string().rfind(kPrefix, 0) == 0)
      files.push_back(entry);
  if (files.size() <= kKeptFiles) return;
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) {
    std::error_code e;
    return a.last_write_time(e) > b.last_write_time(e);
  });
  for (std::size_t i = kKeptFiles; i < files.size(); ++i) fs::remove(files[i].path(), ec);
}

}  // namespace

EarlierRuns load_earlier_runs(const RunInfo& info) {
  EarlierRuns earlier;
  const std::string folder = arcoll::cache_folder();
  if (folder.empty()) return earlier;
  earlier.path = folder + "/" + kPrefix + arcoll::file_safe(info.host.hostname) + "-" +
                 arcoll::file_safe(info.git_commit) + ".txt";
  std::ifstream in(earlier.path);
  if (!in) return earlier;
  std::string first;
  if (!std::getline(in, first) || first != heading(info)) return earlier;
  earlier.runs = parse_runs(in, earlier.path);
  return earlier;
}

std::vector<KeptRatio> all_ratios(const EarlierRuns& earlier) {
  std::vector<KeptRatio> all;
  for (const auto& run : earlier.runs) all.insert(all.end(), run.begin(), run.end());
  return all;
}

void keep_run(EarlierRuns& earlier, const RunInfo& info, std::vector<KeptRatio> now) {
  if (earlier.path.empty()) return;
  earlier.runs.push_back(std::move(now));
  if (earlier.runs.size() > kKeptRuns)
    earlier.runs.erase(earlier.runs.begin(), earlier.runs.end() - kKeptRuns);
  std::ostringstream out;
  out << heading(info) << "\n";
  for (const auto& run : earlier.runs) {
    out << kRunLine << "\n";
    for (const KeptRatio& r : run)
      out << r.peer << " " << r.coll << " " << r.size_bytes << " " << r.value << "\n";
  }
  try {
    const std::filesystem::path folder = std::filesystem::path(earlier.path).parent_path();
    std::filesystem::create_directories(folder);
    write_atomically(earlier.path, out.str());
    prune(folder);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arbench: warning: this run's ratios are not kept: %s\n", e.what());
  }
}

}  // namespace arbench
