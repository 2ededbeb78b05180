#include "arbench/results_file.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace arbench {
namespace {

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw std::runtime_error(path + ": " + why);
}

// j[key] as the JSON type `is` accepts, else an error naming `where.key`.
template <typename Check>
const ResultsJson& field(const ResultsJson& j, const char* key, const std::string& path,
                         const std::string& where, Check is, const char* what) {
  if (!j.is_object() || !j.contains(key) || !is(j[key]))
    bad(path, where + key + ": missing or not " + what);
  return j[key];
}

GroupFigures group_of(const ResultsJson& g, const std::string& path, const std::string& where) {
  auto number = [](const ResultsJson& v) { return v.is_number(); };
  GroupFigures figures;
  figures.time_us = field(g, "time_us", path, where, number, "a number").get<double>();
  figures.busbw_gbs = field(g, "busbw_gbs", path, where, number, "a number").get<double>();
  if (g.contains("spread") && g["spread"].is_object()) {
    const ResultsJson& s = g["spread"];
    auto number_at = [&](const char* key) {
      return field(s, key, path, where + "spread.", number, "a number").get<double>();
    };
    figures.cv = number_at("cv");
    const double median = number_at("median_us");
    figures.spread = median > 0 ? (median - number_at("min_us")) / median : 0.0;
  }
  return figures;
}

}  // namespace

std::string ResultRow::key() const {
  return series() + " " + std::to_string(size_bytes) + " B";
}

std::string ResultRow::series() const {
  return (collective == "allreduce" ? "" : collective + " ") + backend +
         (backend == "arcoll" ? " (" + algorithm + ")" : "") + " " + transport + " " +
         type + " " + op + " np=" + std::to_string(world_size);
}

ResultsFile load_results(const std::string& path) {
  std::ifstream in(path);
  if (!in) bad(path, "cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  ResultsFile file;
  file.path = path;
  try {
    file.json = ResultsJson::parse(text.str());
  } catch (const ResultsJson::parse_error& e) {
    bad(path, std::string("not JSON (") + e.what() + ")");
  }
  auto string = [](const ResultsJson& v) { return v.is_string(); };
  file.schema = field(file.json, "schema", path, "", string, "a string").get<std::string>();
  if (file.schema == "arbench.replay/1" || file.schema == "arbench.comms-trace/1" ||
      file.schema == "arbench.train/1")
    return file;
  if (file.schema != "arcoll.arbench/1")
    bad(path, "schema '" + file.schema +
                  "' is none of arbench's (arcoll.arbench/1, arbench.replay/1, "
                  "arbench.comms-trace/1, arbench.train/1)");
  auto object = [](const ResultsJson& v) { return v.is_object(); };
  auto integer = [](const ResultsJson& v) { return v.is_number_integer(); };
  const ResultsJson& meta = field(file.json, "metadata", path, "", object, "an object");
  const ResultsJson& rows = field(
      file.json, "rows", path, "", [](const ResultsJson& v) { return v.is_array(); }, "a list");
  const auto transport =
      field(meta, "transport", path, "metadata.", string, "a string").get<std::string>();
  // "auto: ring up to 1 MiB, ..." says what auto chose with that run's costs: the setting is
  // "auto".
  auto algorithm =
      field(meta, "algorithm", path, "metadata.", string, "a string").get<std::string>();
  algorithm = algorithm.substr(0, algorithm.find(':'));
  const int world = field(meta, "world_size", path, "metadata.", integer, "an integer").get<int>();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string where = "rows[" + std::to_string(i) + "].";
    const ResultsJson& r = rows[i];
    ResultRow row;
    row.backend = field(r, "backend", path, where, string, "a string").get<std::string>();
    // Files from before arbench measured other collectives hold all-reduces.
    if (r.contains("collective"))
      row.collective = field(r, "collective", path, where, string, "a string").get<std::string>();
    row.algorithm = algorithm;
    row.transport = transport;
    row.world_size = world;
    row.type = field(r, "type", path, where, string, "a string").get<std::string>();
    row.op = field(r, "op", path, where, string, "a string").get<std::string>();
    row.size_bytes = field(r, "size_bytes", path, where, integer, "an integer").get<std::size_t>();
    row.out_of_place = group_of(field(r, "out_of_place", path, where, object, "an object"), path,
                                where + "out_of_place.");
    row.in_place =
        group_of(field(r, "in_place", path, where, object, "an object"), path, where + "in_place.");
    file.rows.push_back(row);
  }
  return file;
}

}  // namespace arbench
