#include "src/base/json_file.hpp"

#include <fstream>
#include <sstream>

#include "arcoll/error.hpp"

namespace arcoll::json_file {

std::string read(const Source& source) {
  std::ifstream in(source.name);
  if (!in) throw ConfigurationError(source.kind, source.name + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Json parse_object(const std::string& text, const Source& source) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw ConfigurationError(source.kind, source.name + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) bad(source, "(top level)", "must be an object");
  return j;
}

void bad(const Source& source, const std::string& field, const std::string& why) {
  throw ConfigurationError(source.kind, source.name + ": field '" + field + "' " + why);
}

const Json& member(const Json& object, const Source& source, const std::string& path,
                   const char* key) {
  const std::string field = path.empty() ? key : path + "." + key;
  if (!object.is_object() || !object.contains(key)) bad(source, field, "is missing");
  return object[key];
}

double positive(const Json& object, const Source& source, const std::string& path,
                const char* key) {
  const Json& value = member(object, source, path, key);
  const std::string field = path.empty() ? key : path + "." + key;
  if (!value.is_number()) bad(source, field, "must be a number");
  const double number = value.get<double>();
  if (!(number > 0) || number > 1e12) bad(source, field, "must be a positive number");
  return number;
}

}  // namespace arcoll::json_file
