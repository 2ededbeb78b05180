#include "arbench/links_command.hpp"

#include <cstdlib>
#include <optional>

#include "arbench/files.hpp"
#include "arbench/links.hpp"
#include "arbench/text.hpp"
#include "arcoll/communicator.hpp"

namespace arbench {

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
        if (!links.json.empty()) return check_writable("--json", links.json);
        return std::nullopt;
      },
      [&](arcoll::Communicator& comm) {
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
