#include "arcoll/error.hpp"

namespace arcoll {
namespace {

std::string compose(const std::string& operation, const std::string& message, int rank, int peer) {
  std::string text = operation.empty() ? std::string("arcoll") : operation;
  if (rank != Error::kNoRank) text += " on rank " + std::to_string(rank);
  if (peer != Error::kNoRank) text += " (peer rank " + std::to_string(peer) + ")";
  return text + ": " + message;
}

}  // namespace

Error::Error(ErrorCode code, std::string operation, std::string message, int rank, int peer)
    : std::runtime_error(compose(operation, message, rank, peer)),
      code_(code),
      operation_(std::move(operation)),
      message_(std::move(message)),
      rank_(rank),
      peer_(peer) {}

void throw_error(ErrorCode code, std::string operation, std::string message, int rank, int peer) {
  auto o = std::move(operation);
  auto m = std::move(message);
  switch (code) {
    case ErrorCode::invalid_argument:
      throw InvalidArgument(o, m, rank, peer);
    case ErrorCode::timeout:
      throw TimeoutError(o, m, rank, peer);
    case ErrorCode::peer_failure:
      throw PeerError(o, m, rank, peer);
    case ErrorCode::protocol:
      throw ProtocolError(o, m, rank, peer);
    case ErrorCode::system:
      throw SystemError(o, m, rank, peer);
    case ErrorCode::configuration:
      throw ConfigurationError(o, m, rank, peer);
    default:
      throw InternalError(o, m, rank, peer);
  }
}

std::exception_ptr make_error(ErrorCode code, std::string operation, std::string message, int rank,
                              int peer) {
  try {
    throw_error(code, std::move(operation), std::move(message), rank, peer);
  } catch (...) {
    return std::current_exception();
  }
}

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::ok:
      return "success";
    case ErrorCode::invalid_argument:
      return "invalid argument";
    case ErrorCode::timeout:
      return "timeout";
    case ErrorCode::peer_failure:
      return "peer failure";
    case ErrorCode::protocol:
      return "protocol error";
    case ErrorCode::system:
      return "system error";
    case ErrorCode::configuration:
      return "configuration error";
    case ErrorCode::internal:
      return "internal error";
  }
  return "unknown error";
}

}  // namespace arcoll
