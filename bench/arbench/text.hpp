// Text for people: printf into strings, sizes, dates, command lines, and the quantiles that
// summarise timings.
#pragma once

#include <string>
#include <vector>

namespace arbench {

// printf into a std::string of the right length.
std::string printf_string(const char* format, ...) __attribute__((format(printf, 1, 2)));
// "8 B", "32 KiB", "1.5 MiB".
std::string format_bytes(double bytes);
// Current time, ISO-8601 UTC ("2024-05-01T12:34:56Z").
std::string utc_now();
// argv joined with spaces, each argument quoted for a POSIX shell when needed.
std::string shell_command_line(int argc, const char* const* argv);
// The q-quantile (0..1) of `values`, interpolating between neighbours as numpy does; 0 for
// none.
double quantile(std::vector<double> values, double q);

}  // namespace arbench
