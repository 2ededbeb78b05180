#include "transports/common/huge_pages.hpp"

#include <fstream>
#include <string>

namespace arcoll::transport {

bool huge_pages_unasked() {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(file, modes);
  return modes.find("[always]") != std::string::npos;
}

}  // namespace arcoll::transport
