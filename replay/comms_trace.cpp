#include "replay/comms_trace.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace arcoll::replay {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

[[noreturn]] void bad(const std::string& file, const std::string& where, const std::string& why) {
  throw std::runtime_error("comms trace " + file + ": " + where + ": " + why);
}

// PARAM's names and their aliases (PyTorch's internal names among them).
std::optional<TraceOp> op_named(const std::string& name) {
  static const std::map<std::string, TraceOp> kOps = {
      {"all_reduce", TraceOp::allreduce},
      {"allreduce", TraceOp::allreduce},
      {"all_gather", TraceOp::allgather},
      {"allgather", TraceOp::allgather},
      {"all_gather_base", TraceOp::allgather},
      {"_allgather_base", TraceOp::allgather},
      {"all_gather_into_tensor", TraceOp::allgather},
      {"reduce_scatter", TraceOp::reduce_scatter},
      {"reduce_scatter_base", TraceOp::reduce_scatter},
      {"_reduce_scatter_base", TraceOp::reduce_scatter},
      {"reduce_scatter_tensor", TraceOp::reduce_scatter},
      {"broadcast", TraceOp::broadcast},
      {"barrier", TraceOp::barrier},
      {"reduce", TraceOp::reduce},
      {"gather", TraceOp::gather},
      {"scatter", TraceOp::scatter},
      {"all_to_all", TraceOp::alltoall},
      {"alltoall", TraceOp::alltoall},
      {"all_to_all_single", TraceOp::alltoall},
      {"alltoall_base", TraceOp::alltoall}};
  auto it = kOps.find(name);
  return it == kOps.end() ? std::nullopt : std::optional(it->second);
}

std::optional<DataType> dtype_named(const std::string& name) {
  static const std::map<std::string, DataType> kTypes = {
      {"float", DataType::f32},   {"float32", DataType::f32},   {"half", DataType::f16},
      {"float16", DataType::f16}, {"bfloat16", DataType::bf16}, {"double", DataType::f64},
      {"float64", DataType::f64}, {"int", DataType::i32},       {"int32", DataType::i32},
      {"long", DataType::i64},    {"int64", DataType::i64},     {"byte", DataType::u8},
      {"uint8", DataType::u8},    {"bool", DataType::u8},       {"char", DataType::i8},
      {"int8", DataType::i8}};
  auto it = kTypes.find(name);
  return it == kTypes.end() ? std::nullopt : std::optional(it->second);
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// An entry's non-negative integer field.
std::int64_t count_field(const Json& entry, const std::string& file, const std::string& where,
                         const char* key) {
  if (!entry.contains(key)) bad(file, where, std::string("no \"") + key + "\"");
  const Json& v = entry[key];
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
    bad(file, where, std::string("\"") + key + "\" is " + v.dump() + ", not a count >= 0");
  return v.get<std::int64_t>();
}

}  // namespace

std::string comms_trace_file(const std::string& path, int rank) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) return path;
  for (const std::string& name :
       {"rank" + std::to_string(rank) + ".json", "rank-" + std::to_string(rank) + ".json"}) {
    const std::string file = path + "/" + name;
    if (::stat(file.c_str(), &info) == 0) return file;
  }
  return path + "/rank" + std::to_string(rank) + ".json";  // reported as unreadable
}

CommsTrace load_comms_trace(const std::string& file, int world_size) {
  std::ifstream in(file);
  if (!in) bad(file, "the file", "cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  Json entries;
  try {
    entries = Json::parse(text.str());
  } catch (const Json::parse_error& e) {
    bad(file, "the file", std::string("not JSON (") + e.what() + ")");
  }
  if (!entries.is_array()) bad(file, "the file", "not a list of entries (PARAM's basic format)");
  CommsTrace trace;
  trace.source = file;
  std::map<std::string, std::size_t> skipped;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Json& e = entries[i];
    const std::string where = "entry " + std::to_string(i);
    if (!e.is_object()) bad(file, where, "not an object");
    if (e.contains("compute")) {
      ++skipped["compute entries: the recorded gaps stand for them"];
      continue;
    }
    if (!e.contains("comms") || !e["comms"].is_string()) bad(file, where, "no \"comms\" name");
    TraceCall call;
    call.name = lower(e["comms"].get<std::string>());
    if (call.name == "wait" || call.name == "init") {  // arcoll's calls complete when they return
      continue;
    }
    if (e.contains("world_size") && e["world_size"].is_number_integer() &&
        e["world_size"].get<int>() != world_size)
      bad(file, where,
          "recorded with world_size " + std::to_string(e["world_size"].get<int>()) +
              "; replay it with as many ranks (--np), not " + std::to_string(world_size));
    const auto op = op_named(call.name);
    if (!op) {
      ++skipped[call.name + ": arcoll has no such collective"];
      continue;
    }
    if (e.contains("global_ranks") && e["global_ranks"].is_array() &&
        e["global_ranks"].size() != static_cast<std::size_t>(world_size)) {
      ++skipped[call.name + " of a sub-group: arcoll communicators span the whole job"];
      continue;
    }
    call.op = *op;
    if (e.contains("startTime_ns")) call.start_ns = count_field(e, file, where, "startTime_ns");
    if (call.op != TraceOp::barrier) {
      if (!e.contains("dtype") || !e["dtype"].is_string()) bad(file, where, "no \"dtype\"");
      const auto type = dtype_named(lower(e["dtype"].get<std::string>()));
      if (!type) bad(file, where, "unknown dtype " + e["dtype"].dump());
      call.type = *type;
      const auto in_count = static_cast<std::size_t>(count_field(e, file, where, "in_msg_size"));
      const auto out_count = static_cast<std::size_t>(count_field(e, file, where, "out_msg_size"));
      const auto p = static_cast<std::size_t>(world_size);
      // Gathers and scatters move one block per rank: the whole buffer is the block times the
      // world, on the output side of a gather and the input side of a scatter; an all-to-all
      // has it on both sides.
      const bool gather = call.op == TraceOp::allgather || call.op == TraceOp::gather;
      const bool all_to_all = call.op == TraceOp::alltoall;
      const bool blocks = gather || all_to_all || call.op == TraceOp::reduce_scatter ||
                          call.op == TraceOp::scatter;
      const std::size_t whole = gather ? out_count : in_count;
      const std::size_t block = !blocks ? in_count : gather ? in_count : all_to_all ? whole / p
                                                                                    : out_count;
      if (blocks && (whole != block * p || (all_to_all && out_count != whole)))
        bad(file, where,
            call.name + " of blocks of " + std::to_string(block) + " elements needs " +
                std::to_string(block * p) + " on " + std::to_string(world_size) + " ranks, not " +
                (gather ? "out_msg_size " : "in_msg_size ") + std::to_string(whole) +
                (all_to_all ? " and out_msg_size " + std::to_string(out_count) +
                                  " (equal blocks; all_to_allv is left out)"
                            : ""));
      call.count = block;
    }
    if (e.contains("root")) {
      if (!e["root"].is_number_integer() || e["root"].get<int>() < 0 ||
          e["root"].get<int>() >= world_size)
        bad(file, where, "\"root\" " + e["root"].dump() + " is not a rank of the job");
      call.root = e["root"].get<int>();
    }
    trace.calls.push_back(call);
  }
  trace.skipped.assign(skipped.begin(), skipped.end());
  return trace;
}

std::vector<double> run_comms_trace(Communicator& comm, const CommsTrace& trace, bool time_faithful,
                                    std::vector<double>* lateness) {
  // One pair of buffers, as large as the largest call needs.
  const auto p = static_cast<std::size_t>(comm.size());
  std::size_t largest = 0;
  for (const TraceCall& c : trace.calls) {
    const bool blocks = c.op == TraceOp::allgather || c.op == TraceOp::reduce_scatter ||
                        c.op == TraceOp::gather || c.op == TraceOp::scatter ||
                        c.op == TraceOp::alltoall;
    const std::size_t elements = blocks ? c.count * p : c.count;
    largest = std::max(largest, elements * size_of(c.type));
  }
  std::vector<char> send(largest, 0), recv(largest, 0);
  std::vector<double> latencies;
  if (lateness) lateness->clear();
  comm.barrier();
  const auto origin = Clock::now();
  std::optional<std::int64_t> first;
  for (const TraceCall& c : trace.calls) {
    if (time_faithful && c.start_ns) {
      if (!first) first = c.start_ns;
      const auto due =
          origin + std::chrono::nanoseconds(std::max<std::int64_t>(0, *c.start_ns - *first));
      std::this_thread::sleep_until(due);
      if (lateness) lateness->push_back(std::chrono::duration<double>(Clock::now() - due).count());
    }
    const auto start = Clock::now();
    switch (c.op) {
      case TraceOp::allreduce:
        comm.allreduce(send.data(), recv.data(), c.count, c.type, ReduceOp::sum);
        break;
      case TraceOp::allgather:
        comm.allgather(send.data(), recv.data(), c.count, c.type);
        break;
      case TraceOp::reduce_scatter:
        comm.reduce_scatter(send.data(), recv.data(), c.count, c.type, ReduceOp::sum);
        break;
      case TraceOp::broadcast:
        comm.broadcast(recv.data(), c.count, c.type, c.root);
        break;
      case TraceOp::barrier:
        comm.barrier();
        break;
      case TraceOp::reduce:
        comm.reduce(send.data(), recv.data(), c.count, c.type, ReduceOp::sum, c.root);
        break;
      case TraceOp::gather:
        comm.gather(send.data(), recv.data(), c.count, c.type, c.root);
        break;
      case TraceOp::scatter:
        comm.scatter(send.data(), recv.data(), c.count, c.type, c.root);
        break;
      case TraceOp::alltoall:
        comm.alltoall(send.data(), recv.data(), c.count, c.type);
        break;
    }
    latencies.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return latencies;
}

}  // namespace arcoll::replay
