// Reading JSON configuration files (tuning files, cluster files): every error is a
// ConfigurationError naming the kind of file, the file and the field at fault.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace arcoll::json_file {

using Json = nlohmann::json;

struct Source {
  std::string kind;  // "tuning file", "topology file"
  std::string name;  // the path, or what the text came from
};

// The whole file; "cannot be read" when it cannot.
std::string read(const Source& source);
// `text` parsed, which must be a JSON object.
Json parse_object(const std::string& text, const Source& source);
[[noreturn]] void bad(const Source& source, const std::string& field, const std::string& why);
// object[key], which must exist; `path.key` names it in errors ("" path: top level).
const Json& member(const Json& object, const Source& source, const std::string& path,
                   const char* key);
// object[key] as a number > 0 (and below 1e12).
double positive(const Json& object, const Source& source, const std::string& path,
                const char* key);

}  // namespace arcoll::json_file
