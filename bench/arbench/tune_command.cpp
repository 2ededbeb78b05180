#include "arbench/tune_command.hpp"

#include "arbench/files.hpp"
#include "arbench/text.hpp"
#include "arcoll/communicator.hpp"
#include "arcoll/tuning.hpp"

namespace arbench {

int run_tune_command(const TuneFlags& flags) {
  const std::string& output = flags.output;
  return run_tool(
      "tune", flags.tool, 2, 2, [&] { return check_writable("-o/--output", output); },
      [&](arcoll::Communicator& comm) {
        // Measured again: the cache of calibration on first use is renewed too.
        const arcoll::CalibratedTuning calibrated =
            arcoll::calibrated_tuning(comm, arcoll::Calibration::now);
        const arcoll::Tuning& tuning = calibrated.tuning;
        if (comm.rank() != 0) return 0;
        // Bandwidth and reduction: out of cache (16 MiB), and in cache (256 KiB); bandwidth
        // of small messages (16 KiB).
        print("# arbench tune: " + tuning.measured_on + "\n# " +
              printf_string("%-18s %14s %16s %14s %16s %14s %14s", "transport", "latency (us)",
                            "bandwidth (GB/s)", "reduce (GB/s)", "in cache: bw", "reduce",
                            "16 KiB: bw") +
              "\n");
        for (const auto& [name, c] : tuning.transports)
          print(printf_string("  %-18s %14.2f %16.2f %14.2f %16.2f %14.2f %14.2f\n", name.c_str(),
                              c.latency_us, c.bandwidth_gbs, c.reduce_gbs, c.cached_bandwidth_gbs,
                              c.cached_reduce_gbs, c.small_bandwidth_gbs));
        print("# " + calibrated.source + "\n");
        arcoll::save_tuning(tuning, output);
        print("# written to " + output + " (use it with --tuning or ARCOLL_TUNING_FILE)\n");
        return 0;
      });
}

}  // namespace arbench
