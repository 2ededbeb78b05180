// One exception hierarchy. Every error says what failed (the operation), where (local rank,
// peer rank when one is involved) and what the user can do about it.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace arcoll {

enum class ErrorCode : int {
  ok = 0,
  invalid_argument = 1,  // bad call: null buffer, unsupported type/op, bad rank...
  timeout = 2,           // a deadline expired waiting for a peer
  peer_failure = 3,      // a peer closed its connection, crashed or aborted
  protocol = 4,          // malformed or unexpected bytes on a socket or the store
  system = 5,            // an operating-system call failed
  configuration = 6,     // environment or launch information missing or inconsistent
  internal = 7,
};

class Error : public std::runtime_error {
 public:
  static constexpr int kNoRank = -1;

  Error(ErrorCode code, std::string operation, std::string message, int rank = kNoRank,
        int peer = kNoRank);

  ErrorCode code() const noexcept { return code_; }
  const std::string& operation() const noexcept { return operation_; }
  const std::string& message() const noexcept { return message_; }
  int rank() const noexcept { return rank_; }
  int peer() const noexcept { return peer_; }

 private:
  ErrorCode code_;
  std::string operation_;
  std::string message_;
  int rank_;
  int peer_;
};

#define ARCOLL_DEFINE_ERROR(Name, Code)                                                      \
  class Name : public Error {                                                                \
   public:                                                                                   \
    Name(std::string operation, std::string message, int rank = kNoRank, int peer = kNoRank) \
        : Error(Code, std::move(operation), std::move(message), rank, peer) {}               \
  };

ARCOLL_DEFINE_ERROR(InvalidArgument, ErrorCode::invalid_argument)
ARCOLL_DEFINE_ERROR(TimeoutError, ErrorCode::timeout)
ARCOLL_DEFINE_ERROR(PeerError, ErrorCode::peer_failure)
ARCOLL_DEFINE_ERROR(ProtocolError, ErrorCode::protocol)
ARCOLL_DEFINE_ERROR(SystemError, ErrorCode::system)
ARCOLL_DEFINE_ERROR(ConfigurationError, ErrorCode::configuration)
ARCOLL_DEFINE_ERROR(InternalError, ErrorCode::internal)

#undef ARCOLL_DEFINE_ERROR

std::string_view to_string(ErrorCode code);

// The error of class `code` (InvalidArgument for ErrorCode::invalid_argument, ...), thrown or
// held for later.
[[noreturn]] void throw_error(ErrorCode code, std::string operation, std::string message,
                              int rank = Error::kNoRank, int peer = Error::kNoRank);
std::exception_ptr make_error(ErrorCode code, std::string operation, std::string message,
                              int rank = Error::kNoRank, int peer = Error::kNoRank);

}  // namespace arcoll
