#include "arbench/links_command.hpp"

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "arbench/files.hpp"
#include "arbench/links.hpp"
#include "arbench/text.hpp"
#include "arcoll/communicator.hpp"

namespace arbench {
namespace {

// "25gbit", "100mbit", "1.5gbit" (as tc writes rates) in GB/s; 0 when it is not a rate.
double parse_rate_gbs(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(value > 0)) return 0;
  const std::string unit = end;
  if (unit == "gbit") return value / 8;
  if (unit == "mbit") return value / 8000;
  return 0;
}

}  // namespace

int run_links_command(const LinksFlags& links) {
  LinkSettings settings;
  return run_tool(
      "links", links.tool, 2, 2,
      [&]() -> std::optional<std::string> {
        settings.large_bytes = parse_size("--bytes", links.bytes);
        if (settings.large_bytes == 0) return "--bytes: the message must not be empty";
        char* end = nullptr;
        settings.slow_fraction = std::strtod(links.threshold.c_str(), &end);
        if (end == links.threshold.c_str() || *end != '\0' || !(settings.slow_fraction > 0) ||
            !(settings.slow_fraction < 1))
          return "--threshold: " + quoted(links.threshold) + " is not a fraction between 0 and 1";
        if (!links.expect.empty()) {
          settings.expected_gbs = parse_rate_gbs(links.expect);
          if (settings.expected_gbs == 0)
            return "--expect: " + quoted(links.expect) + " is not a rate (e.g. 100mbit, 25gbit)";
          if (!links.baseline.empty()) return "--expect and --baseline: give one reference";
        }
        if (!links.baseline.empty()) {
          try {
            settings.baseline = load_link_baseline(links.baseline);
          } catch (const std::runtime_error& e) {
            return "--baseline: " + std::string(e.what());
          }
        }
        if (!links.json.empty()) return check_writable("--json", links.json);
        return std::nullopt;
      },
      [&](arcoll::Communicator& comm) {
        if (settings.baseline && settings.baseline->ranks != comm.size()) {
          if (comm.rank() == 0)
            std::fprintf(stderr, "arbench links: --baseline %s holds %d ranks, this job %d\n",
                         links.baseline.c_str(), settings.baseline->ranks, comm.size());
          comm.barrier();  // every rank done joining before any leaves: all exit 2
          return kUsageError;
        }
        const LinkMatrix matrix = measure_links(comm, settings);
        if (comm.rank() != 0) return 0;
        print("# arbench links: " + std::to_string(comm.size()) + " ranks on " +
              std::to_string(comm.node_count()) + " host(s), " + comm.transport_name() + ", " +
              format_bytes(static_cast<double>(settings.large_bytes)) +
              " messages for bandwidth\n" + links_text(matrix));
        if (!links.json.empty()) write_atomically(links.json, links_json(matrix));
        return 0;
      });
}

}  // namespace arbench
