// The default command of arbench: the all-reduce sweep in nccl-tests' columns, through arcoll
// or the peers it is compared with, on ranks forked here or started by a launcher (mpirun is
// started for MPI backends).
#pragma once

#include <string>

namespace arbench {

// The sweep's flags as typed; validated by make_plan.
struct SweepFlags {
  std::string min_bytes = "8";
  std::string max_bytes = "128M";
  std::string step_factor = "4";
  std::string step_bytes;
  std::string np;
  std::string warmup_iters = "5";
  std::string iters = "20";
  std::string repeat = "1";
  std::string min_busbw;
  std::string coll = "allreduce";
  std::string datatype = "f32";
  std::string op = "sum";
  std::string algo;
  std::string transport;
  std::string chunk;
  std::string channels;
  std::string wire;
  std::string tuning;
  std::string sockets;
  std::string check = "1";
  std::string json;
  std::string csv;
  std::string timeout;
  std::string backend = "arcoll";
  std::string compare;
  bool memcpy = false;
  bool shared_buffers = false;
  std::string device = "host";
  std::string gloo_algo = "ring_chunked";
  std::string mpirun_args;  // empty: arbench's choice (sweep_command.cpp)
  std::string ps_servers = "0";
  std::string ps_piece = "4M";
  // Whether -f and -i were given on the command line.
  bool step_factor_given = false;
  bool step_bytes_given = false;
};


// Validates the flags and runs the sweep; the exit code (2: a usage error).
int run_sweep_command(const SweepFlags& flags, int argc, const char* const* argv);

}  // namespace arbench
